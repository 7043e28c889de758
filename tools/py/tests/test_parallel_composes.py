"""`-n N` composed with --shard and --rerun-failures, and Ctrl-C (real pytest-xdist, real
Ray, a real SIGINT). A file apart from test_parallel_testmon.py so that under -n the two run
side by side.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from xdist_project import (
    PLUGIN,
    RUN_UNIT,
    Head,
    env_for,
    make_project,
    outcomes_of,
    ray_processes,
    results_of,
    run_logged,
    run_pytest,
)

# --- shards, reruns --------------------------------------------------------------------------

SHARD_FILES = {f"tests/test_s{i}.py": f"def test_s{i}():\n    pass\n" for i in range(6)}


def test_shards_compose_with_n(tmp_path: Path, shared_head: Head) -> None:
    root = make_project(tmp_path, SHARD_FILES)
    env = env_for(root, shared_head)
    seen: list[set[str]] = []
    for index in (1, 2):  # two CI jobs: each plans from the same (here: no) history
        out = f"out_shard{index}"
        proc = run_pytest(root, "--shard", f"{index}/2", "-n", "2", "--unit-results-dir", out, env=env)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        seen.append(set(outcomes_of(root, out)))
    assert seen[0] and seen[1] and not seen[0] & seen[1]
    assert seen[0] | seen[1] == {f"test_s{i}" for i in range(6)}


def test_rerun_failures_through_run_unit_sh(tmp_path: Path, shared_head: Head) -> None:
    root = make_project(tmp_path, {
        "tests/test_flaky.py": textwrap.dedent("""
            import os

            def test_flaky():
                if not os.path.exists("tried"):
                    open("tried", "w").close()
                    assert False, "first attempt"
        """),
        "tests/test_fine.py": "def test_fine():\n    pass\n",
    })  # fmt: skip
    env = env_for(root, shared_head, PYTEST_ADDOPTS=" ".join(PLUGIN))
    proc = run_logged(["bash", str(RUN_UNIT), "-n", "2", "--rerun-failures", "2"], root, env, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "-n 2" in proc.stdout  # passed through to pytest
    tests = results_of(root)["tests"]
    assert tests["tests/test_flaky.py::test_flaky"]["attempts"] == ["failed", "passed"]
    assert tests["tests/test_fine.py::test_fine"]["attempts"] == ["passed"]


# --- Ctrl-C ----------------------------------------------------------------------------------

SLOW_FILES = {
    "tests/test_quick.py": "def test_quick(tracker):\n    tracker.track('v', 1)\n",
    "tests/test_slow.py": textwrap.dedent("""
        import os, time
        from pathlib import Path


        def test_slow(cluster):
            cluster.get(cluster.remote(lambda: 1).remote())
            Path("started").touch()
            time.sleep(120)
    """),
}


def test_ctrl_c_writes_results_and_leaves_no_ray_process(tmp_path: Path) -> None:
    root = make_project(tmp_path, SLOW_FILES)
    env = env_for(root)

    def like_a_terminal() -> None:
        signal.signal(signal.SIGINT, signal.SIG_DFL)  # a background job inherits SIGINT ignored
        os.setsid()

    proc = subprocess.Popen([sys.executable, "-m", "pytest", *PLUGIN, "-n", "2"], cwd=root,
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            preexec_fn=like_a_terminal)  # fmt: skip
    try:
        deadline = time.monotonic() + 240
        while not (root / "started").exists():
            assert proc.poll() is None, proc.communicate()[0]
            assert time.monotonic() < deadline, "the slow test did not start"
            time.sleep(0.2)
        time.sleep(1)  # test_quick's report has reached the controller
        os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C: the whole foreground group
        out, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 2, out
    doc = results_of(root)
    assert doc["exit_status"] == 2
    assert doc["tests"]["tests/test_quick.py::test_quick"]["outcome"] == "passed"
    assert doc["metrics"]["test_quick::test_quick"]["v"] == 1
    deadline = time.monotonic() + 15
    while ray_processes(env["RAY_TMPDIR"]) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not ray_processes(env["RAY_TMPDIR"])
