"""`-n N` with real pytest-xdist and real Ray: one shared cluster for the run, GPU placement
through Ray's accounting, and the harness's features under -n (one results file with every
worker's metrics, memory and coverage; marker configurations, -k, run_first, num_gpus
skips; --testmon with remote-aware selection; --shard; --rerun-failures; Ctrl-C).

Every run is a pytest subprocess in a small project. Runs that only test selection join one
Ray cluster that a helper process holds (RAY_ADDRESS: "or the one in RAY_ADDRESS"); the
others let the controller start and stop its own. A GPU is a Ray resource here: a cluster
started with `num_gpus=1` on a CPU machine hands it out exactly as on a GPU machine.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import pytest

from testharness import parallel

RUN_UNIT = Path(__file__).resolve().parents[2] / "run_unit.sh"
PLUGIN = ["-p", "testharness.parallel"]  # as where the harness is not installed (-p, never twice)

PYPROJECT = """
[tool.testharness]
source_packages = ["mylib"]
results_dir = "out"
test_roots = ["tests"]
remote_map_file = ".sel_map.json"
remote_state_file = ".sel_state.json"

[tool.testharness.marker_groups.hf_gated]
option = "--hf-gated"
mode = "opt-in"
args = "model_id"
description = "needs a gated Hugging Face model"
hf_models = true

[tool.testharness.marker_groups.mcore]
option = "--mcore-only"
mode = "only"
description = "needs megatron-core"
requires = ["megatron.core"]
requires_name = "megatron-core"

[tool.pytest.ini_options]
testpaths = ["tests"]

[tool.coverage.run]
patch = ["subprocess"]  # Ray workers measured too (as in this repository)
"""

# The project's start-up hook: a cluster of 4 CPUs and FAKE_GPUS logical GPUs, and a trace.
ROOT_CONFTEST = """
import os
from pathlib import Path

pytest_plugins = ["testharness.plugin"]


def pytest_testharness_start_ray(config, workers):
    import ray

    Path("STARTED_BY_HOOK").write_text(str(workers))
    for attempt in range(3):  # a loaded machine: Ray's own start-up waits can run out
        try:
            ray.init(address="local", num_cpus=4, num_gpus=int(os.environ.get("FAKE_GPUS", "0")),
                     include_dashboard=False, _node_ip_address="127.0.0.1")
            return ray.get_runtime_context().gcs_address
        except Exception:
            ray.shutdown()
            if attempt == 2:
                raise
"""

TESTS_CONFTEST = """
import os
import pytest


@pytest.fixture(scope="session")
def cluster():
    import ray

    ray.init(address=os.environ.get("RAY_ADDRESS") or "local", include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()
"""

ACTOR_FILES = {
    "mylib/__init__.py": "",
    "mylib/helper.py": "def scale(x):\n    return x * 2\n",
    "mylib/worker.py": textwrap.dedent("""
        from mylib.helper import scale


        class Doubler:
            def run(self, x):
                return scale(x)


        def describe():
            return "doubler"
    """),
    "tests/test_actor.py": textwrap.dedent("""
        import os
        from mylib.worker import Doubler


        def test_actor(cluster, tracker):
            actor = cluster.remote(Doubler).remote()
            assert cluster.get(actor.run.remote(3)) == 6
            tracker.track("gcs", cluster.get_runtime_context().gcs_address)
            tracker.track("pid", os.getpid())
            tracker.log_max_mem("mem")
    """),
    "tests/test_local.py": textwrap.dedent("""
        import os
        from mylib.worker import describe


        def test_local(cluster, tracker):
            assert describe() == "doubler"
            tracker.track("gcs", cluster.get_runtime_context().gcs_address)
            tracker.track("pid", os.getpid())
    """),
}


def _project(root: Path, files: dict[str, str]) -> Path:
    (root / "pyproject.toml").write_text(PYPROJECT)
    (root / "conftest.py").write_text(ROOT_CONFTEST)
    (root / "tests").mkdir(exist_ok=True)
    (root / "tests" / "conftest.py").write_text(TESTS_CONFTEST)
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def _env(root: Path, head: Head | None = None, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "TESTHARNESS_", "RAY_ADDRESS", "COV_"))}
    env.update(PYTHONPATH=os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")])),
               RAY_ENABLE_UV_RUN_RUNTIME_ENV="0", HF_HUB_OFFLINE="1",
               TESTHARNESS_ROOT=str(root), TESTHARNESS_NO_DISCOVERY="1")  # fmt: skip
    env.update(extra)
    env["RAY_TMPDIR"] = (
        head.ray_tmpdir if head else tempfile.mkdtemp(prefix="par_ray_", dir="/tmp")
    )  # short: socket paths
    if head:
        # A cluster that ray.init started asks for Ray's token (~/.ray/auth_token); a process
        # that did not start it sends the token only when told to.
        env.update(RAY_ADDRESS=head.address, RAY_AUTH_MODE="token")
    return env


def _run(cmd: list[str], root: Path, env: dict[str, str], timeout: float) -> subprocess.CompletedProcess[str]:
    """Output to a file, not a pipe: a Ray process that outlived the run (the failure some
    tests look for) must not keep us reading forever."""
    with tempfile.TemporaryFile("w+") as out:
        proc = subprocess.run(
            cmd, cwd=root, env=env, stdout=out, stderr=subprocess.STDOUT, text=True, timeout=timeout, check=False
        )
        out.seek(0)
        return subprocess.CompletedProcess(cmd, proc.returncode, out.read(), "")


def _pytest(
    root: Path, *args: str, env: dict[str, str] | None = None, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "pytest", *PLUGIN, "-rA", *args]
    return _run(cmd, root, env or _env(root), timeout)


def _results(root: Path, out: str = "out") -> dict[str, Any]:
    return json.loads((root / out / "unit_results.json").read_text())


def _outcomes(root: Path, out: str = "out") -> dict[str, str]:
    return {k.split("::", 1)[1]: v["outcome"] for k, v in _results(root, out)["tests"].items()}


def _ray_processes(ray_tmpdir: str) -> list[str]:
    """Processes of the Ray cluster(s) whose session files are under `ray_tmpdir`."""
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        try:
            if any(ray_tmpdir in part for part in proc.info["cmdline"] or []):
                found.append(" ".join(proc.info["cmdline"])[:120])
        except psutil.Error:
            continue
    return found


@dataclass(frozen=True)
class Head:
    address: str
    ray_tmpdir: str  # a joiner needs it: Ray's session token is found there


@pytest.fixture(scope="module")
def shared_head() -> Iterator[Head]:
    """A Ray cluster held by a helper process, for runs that join RAY_ADDRESS."""
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env["RAY_TMPDIR"] = tempfile.mkdtemp(prefix="par_head_", dir="/tmp")
    code = (
        "import sys, ray; ray.init(num_cpus=4, include_dashboard=False, _node_ip_address='127.0.0.1'); "
        "print(ray.get_runtime_context().gcs_address, flush=True); sys.stdin.read(); ray.shutdown()"
    )
    for _attempt in range(3):  # a loaded machine: Ray's own start-up waits can run out
        proc = subprocess.Popen(
            [sys.executable, "-c", code], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        address = proc.stdout.readline().strip() if proc.stdout else ""
        if address:
            break
        proc.wait(timeout=120)
    assert address, "the helper's Ray cluster did not start (3 attempts)"
    try:
        yield Head(address, env["RAY_TMPDIR"])
    finally:
        if proc.stdin:
            proc.stdin.close()
        proc.wait(timeout=120)


# --- one cluster, one results file -----------------------------------------------------------


def test_workers_share_one_cluster_that_the_controller_starts_and_stops(tmp_path: Path) -> None:
    root = _project(tmp_path, ACTOR_FILES)
    env = _env(root)
    proc = _pytest(root, "-n", "2", "--cov=mylib", "--cov-report=json:cov.json", env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (root / "STARTED_BY_HOOK").read_text() == "2"  # the project's own start-up
    assert "2 xdist workers share the Ray cluster started at" in proc.stdout
    doc = _results(root)
    metrics = doc["metrics"]
    assert metrics["test_actor::test_actor"]["pid"] != metrics["test_local::test_local"]["pid"]  # two workers
    assert metrics["test_actor::test_actor"]["gcs"] == metrics["test_local::test_local"]["gcs"]  # one cluster
    sessions = [p for p in (Path(env["RAY_TMPDIR"]) / "ray").iterdir() if p.name.startswith("session_2")]
    assert len(sessions) == 1, sessions
    assert not _ray_processes(env["RAY_TMPDIR"])  # stopped with the run
    # One record (and one dated copy) by the controller, with what the workers measured.
    assert len(list((root / "out" / "unit_results").glob("*.json"))) == 1
    assert {k: v["outcome"] for k, v in doc["tests"].items()} == {
        "tests/test_actor.py::test_actor": "passed", "tests/test_local.py::test_local": "passed"}  # fmt: skip
    assert all(m["_elapsed"] > 0 for m in metrics.values())
    if Path("/dev/nvidiactl").exists():  # NVIDIA GPUs here: the tracker reads their memory
        assert doc["memory_source"] == "gpu" and metrics["test_actor::test_actor"]["mem"] >= 0
    else:
        assert doc["memory_source"] == "rss" and metrics["test_actor::test_actor"]["mem"] > 0
    assert bool(doc["gpu_types"]) == Path("/dev/nvidiactl").exists(), doc["gpu_types"]
    # Coverage combined over the xdist workers AND the Ray worker that ran Doubler.run.
    assert isinstance(doc["coverage"], float)
    cov = json.loads((root / "cov.json").read_text())["files"]
    helper = next(v for k, v in cov.items() if k.endswith("helper.py"))
    assert 2 in helper["executed_lines"]  # `return x * 2`: only ever run inside the actor


def test_a_cluster_in_ray_address_is_joined_and_left_running(tmp_path: Path, shared_head: Head) -> None:
    root = _project(tmp_path, ACTOR_FILES)
    proc = _pytest(root, "-n", "2", env=_env(root, shared_head))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "share the Ray cluster joined at" in proc.stdout and not (root / "STARTED_BY_HOOK").exists()
    assert {m["gcs"] for m in _results(root)["metrics"].values()} == {shared_head.address}


# --- GPUs: Ray hands them out; uses_cuda holds them for CUDA that Ray does not see ----------

GPU_FILES = {
    # CUDA in the test process (stand-in: the interval it would use the GPU).
    "tests/test_in_process.py": textwrap.dedent("""
        import json, time
        import pytest


        @pytest.mark.uses_cuda
        def test_in_process():
            t0 = time.time(); time.sleep(3)
            open("in_process.json", "w").write(json.dumps([t0, time.time()]))
    """),
    # Ray actors that each need the (only) GPU.
    "tests/test_actors.py": textwrap.dedent("""
        import json, time


        def _hold(cluster, name):
            @cluster.remote(num_gpus=1)
            def hold():
                t0 = time.time(); time.sleep(3)
                return [t0, time.time()]
            open(name, "w").write(json.dumps(cluster.get(hold.remote())))


        def test_actor_1(cluster):
            _hold(cluster, "actor_1.json")


        def test_actor_2(cluster):
            _hold(cluster, "actor_2.json")
    """),
}


def test_one_gpu_is_never_used_by_two_tests_at_once(tmp_path: Path) -> None:
    root = _project(tmp_path, GPU_FILES)
    proc = _pytest(root, "-n", "2", "--dist", "load", env=_env(root, FAKE_GPUS="1"))  # spread even one file
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "(1 GPU(s))" in proc.stdout
    spans = sorted(
        tuple(json.loads((root / f).read_text())) for f in ("in_process.json", "actor_1.json", "actor_2.json")
    )
    for (_, end), (start, _) in zip(spans, spans[1:], strict=False):
        assert end <= start, spans  # one after the other, whichever worker ran them


def test_a_lease_leaves_the_test_its_own_ray_init_and_ends_after_the_test(tmp_path: Path) -> None:
    # The lease is taken before the test's fixtures run: a test (or fixture) that calls
    # ray.init() itself must still be able to, and the next uses_cuda test must get the GPUs.
    test = textwrap.dedent("""
        import pytest


        @pytest.mark.uses_cuda
        def test_first(cluster):
            assert cluster.available_resources().get("GPU", 0) == 0  # held for this test


        @pytest.mark.uses_cuda
        def test_second(cluster):
            assert cluster.available_resources().get("GPU", 0) == 0
    """)
    root = _project(tmp_path, {"tests/test_leases.py": test})
    env = _env(root, FAKE_GPUS="1", TESTHARNESS_GPU_LEASE_TIMEOUT_S="60")
    proc = _pytest(root, "-n", "1", "-rs", env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert _outcomes(root) == {"test_first": "passed", "test_second": "passed"}


def test_without_gpus_uses_cuda_holds_nothing(tmp_path: Path, shared_head: Head) -> None:
    root = _project(tmp_path, {"tests/test_in_process.py": GPU_FILES["tests/test_in_process.py"]})
    proc = _pytest(root, "-n", "2", env=_env(root, shared_head))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert _outcomes(root) == {"test_in_process": "passed"}


@pytest.mark.skipif(
    not Path("/dev/nvidiactl").exists(), reason="needs an NVIDIA GPU (checks a real CUDA context under the lease)"
)
def test_a_real_cuda_test_holds_the_gpus_it_sees(tmp_path: Path) -> None:
    root = _project(
        tmp_path,
        {
            "tests/test_cuda.py": textwrap.dedent("""
        import pytest, ray


        @pytest.mark.uses_cuda
        def test_cuda(cluster):
            import torch
            x = torch.ones(1024, device="cuda")
            assert float(x.sum()) == 1024
            assert ray.available_resources().get("GPU", 0) == 0  # all held for this test
    """)
        },
    )
    import torch

    proc = _pytest(root, "-n", "2", env=_env(root, FAKE_GPUS=str(torch.cuda.device_count())))
    assert proc.returncode == 0, proc.stdout + proc.stderr


# --- selection under -n --------------------------------------------------------------------

SELECTION_FILES = {
    "tests/test_sel.py": textwrap.dedent("""
        import pytest


        def test_plain(): pass


        @pytest.mark.hf_gated("someorg/not-cached-model")
        def test_gated(): pass


        @pytest.mark.mcore
        def test_mcore(): pass


        @pytest.mark.mcore
        @pytest.mark.hf_gated("someorg/not-cached-model")
        def test_mcore_gated(): pass


        @pytest.mark.num_gpus(64)
        def test_many_gpus(): pass
    """),
    # megatron.core only has to import for --mcore-only (the real one is an extra).
    "fake_site/megatron/__init__.py": "",
    "fake_site/megatron/core/__init__.py": "",
}


@pytest.mark.parametrize(
    "flags, expected",
    [
        ([], {"test_plain": "passed", "test_many_gpus": "skipped"}),
        (["--hf-gated"], {"test_plain": "passed", "test_gated": "skipped", "test_many_gpus": "skipped"}),
        (["--mcore-only"], {"test_mcore": "passed"}),
        (["--mcore-only", "--hf-gated"], {"test_mcore": "passed", "test_mcore_gated": "skipped"}),
        (["--hf-gated", "-k", "gated or plain"], {"test_plain": "passed", "test_gated": "skipped"}),
    ],
    ids=["default", "hf-gated", "mcore-only", "mcore-only+hf-gated", "k"],
)
def test_marker_configurations_and_k(
    tmp_path: Path, shared_head: Head, flags: list[str], expected: dict[str, str]
) -> None:
    root = _project(tmp_path, SELECTION_FILES)
    env = _env(root, shared_head)
    env["PYTHONPATH"] = f"{root / 'fake_site'}{os.pathsep}{env['PYTHONPATH']}"
    proc = _pytest(root, "-n", "2", *flags, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert _outcomes(root) == expected
    if "test_many_gpus" in expected:
        assert re.search(r"needs 64 GPUs, \d+ available", proc.stdout), proc.stdout


RUN_FIRST_FILES = {
    "tests/test_a.py": textwrap.dedent("""
        import time
        import pytest


        @pytest.mark.run_first
        def test_first():
            time.sleep(3)
            open("first_done", "w").write(repr(time.time()))
    """),
    **{f"tests/test_{name}.py": f"import time\n\ndef test_{name}():\n    open('start_{name}', 'w').write(repr(time.time()))\n"
       for name in ("b", "c", "d")},
}  # fmt: skip


def test_run_first_finishes_before_any_other_test_starts(tmp_path: Path, shared_head: Head) -> None:
    root = _project(tmp_path, RUN_FIRST_FILES)
    proc = _pytest(root, "-n", "2", env=_env(root, shared_head))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    done = float((root / "first_done").read_text())
    starts = [float((root / f"start_{n}").read_text()) for n in ("b", "c", "d")]
    assert min(starts) >= done, (done, starts)


def test_barrier_waits_for_every_marker(tmp_path: Path) -> None:
    markers = [parallel.done_marker(tmp_path, n) for n in ("a::x", "b::y")]
    assert markers[0] != markers[1]
    assert parallel.wait_for_markers(markers, timeout_s=0.3, poll_s=0.05) == markers
    markers[0].touch()
    assert parallel.wait_for_markers(markers, timeout_s=0.3, poll_s=0.05) == markers[1:]
    markers[1].touch()
    assert parallel.wait_for_markers(markers, timeout_s=0) == []


# --- testmon, shards, reruns -----------------------------------------------------------------


def _ran(proc: subprocess.CompletedProcess[str]) -> set[str]:
    return {line.split()[1] for line in proc.stdout.splitlines() if line.startswith("PASSED ")}


def test_testmon_with_remote_aware_selection(tmp_path: Path, shared_head: Head) -> None:
    root = _project(tmp_path, ACTOR_FILES)
    env = _env(root, shared_head)
    seed = _pytest(root, "-n", "2", "--testmon", env=env)
    assert seed.returncode == 0, seed.stdout + seed.stderr
    assert _ran(seed) == {"tests/test_actor.py::test_actor", "tests/test_local.py::test_local"}
    # An edit to code that only runs in the Ray actor: the reach the worker recorded selects
    # exactly the test that sent it there.
    helper = root / "mylib" / "helper.py"
    helper.write_text(helper.read_text().replace("return x * 2", "return 2 * x"))
    again = _pytest(root, "-n", "2", "--testmon", env=env)
    assert again.returncode == 0, again.stdout + again.stderr
    assert _ran(again) == {"tests/test_actor.py::test_actor"}
    # Nothing changed since: nothing runs, and the record says the run was fine.
    idle = _pytest(root, "-n", "2", "--testmon", env=env)
    assert idle.returncode == 0 and _ran(idle) == set(), idle.stdout + idle.stderr
    assert _results(root)["tests"] == {} and _results(root)["exit_status"] == 0


def test_testmon_records_state_only_for_tests_that_passed(tmp_path: Path, shared_head: Head) -> None:
    files = {
        **ACTOR_FILES,
        "tests/test_local.py": ACTOR_FILES["tests/test_local.py"].replace('== "doubler"', '== "nope"'),
    }
    root = _project(tmp_path, files)
    env = _env(root, shared_head)
    first = _pytest(root, "-n", "2", "--testmon", env=env)
    assert first.returncode == 1
    again = _pytest(root, "-n", "2", "--testmon", env=env)  # no edit: the failure is still due
    assert "tests/test_local.py::test_local" in again.stdout and _ran(again) == set(), again.stdout
    state = json.loads((root / ".sel_state.json").read_text())
    assert set(state["reach"]) == {"tests/test_actor.py::test_actor"}


SHARD_FILES = {f"tests/test_s{i}.py": f"def test_s{i}():\n    pass\n" for i in range(6)}


def test_shards_compose_with_n(tmp_path: Path, shared_head: Head) -> None:
    root = _project(tmp_path, SHARD_FILES)
    env = _env(root, shared_head)
    seen: list[set[str]] = []
    for index in (1, 2):  # two CI jobs: each plans from the same (here: no) history
        out = f"out_shard{index}"
        proc = _pytest(root, "--shard", f"{index}/2", "-n", "2", "--unit-results-dir", out, env=env)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        seen.append(set(_outcomes(root, out)))
    assert seen[0] and seen[1] and not seen[0] & seen[1]
    assert seen[0] | seen[1] == {f"test_s{i}" for i in range(6)}


def test_rerun_failures_through_run_unit_sh(tmp_path: Path, shared_head: Head) -> None:
    root = _project(tmp_path, {
        "tests/test_flaky.py": textwrap.dedent("""
            import os

            def test_flaky():
                if not os.path.exists("tried"):
                    open("tried", "w").close()
                    assert False, "first attempt"
        """),
        "tests/test_fine.py": "def test_fine():\n    pass\n",
    })  # fmt: skip
    env = _env(root, shared_head, PYTEST_ADDOPTS=" ".join(PLUGIN))
    proc = _run(["bash", str(RUN_UNIT), "-n", "2", "--rerun-failures", "2"], root, env, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "-n 2" in proc.stdout  # passed through to pytest
    tests = _results(root)["tests"]
    assert tests["tests/test_flaky.py::test_flaky"]["attempts"] == ["failed", "passed"]
    assert tests["tests/test_fine.py::test_fine"]["attempts"] == ["passed"]


# --- Ctrl-C ---------------------------------------------------------------------------------

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
    root = _project(tmp_path, SLOW_FILES)
    env = _env(root)

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
    doc = _results(root)
    assert doc["exit_status"] == 2
    assert doc["tests"]["tests/test_quick.py::test_quick"]["outcome"] == "passed"
    assert doc["metrics"]["test_quick::test_quick"]["v"] == 1
    deadline = time.monotonic() + 15
    while _ray_processes(env["RAY_TMPDIR"]) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not _ray_processes(env["RAY_TMPDIR"])
