"""`-n N`: marker configurations, -k, num_gpus skips, run_first and the order files are
handed out in (real pytest-xdist, joining a Ray cluster a helper process holds).
"""

from __future__ import annotations

import json
import os
import re
import textwrap
from pathlib import Path

import pytest
from xdist_project import (
    Head,
    env_for,
    make_project,
    outcomes_of,
    run_pytest,
)

from testharness import barrier, xdist_schedule

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
    root = make_project(tmp_path, SELECTION_FILES)
    env = env_for(root, shared_head)
    env["PYTHONPATH"] = f"{root / 'fake_site'}{os.pathsep}{env['PYTHONPATH']}"
    proc = run_pytest(root, "-n", "2", *flags, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert outcomes_of(root) == expected
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
    root = make_project(tmp_path, RUN_FIRST_FILES)
    proc = run_pytest(root, "-n", "2", env=env_for(root, shared_head))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    done = float((root / "first_done").read_text())
    starts = [float((root / f"start_{n}").read_text()) for n in ("b", "c", "d")]
    assert min(starts) >= done, (done, starts)


def _stamp(name: str) -> str:
    return f"\n\ndef test_{name}():\n    open('start_{name}', 'w').write(repr(time.perf_counter_ns()))\n"


# xdist alone would start file a (most tests) first; b was by far the longest last time. The
# run_first test is in c: its file must come before anything else, or the one worker would
# wait at the barrier for a file still in its queue.
ORDER_FILES = {
    "tests/test_a.py": "import time" + "".join(_stamp(f"a{i}") for i in range(3)),
    "tests/test_b.py": "import time" + _stamp("b"),
    "tests/test_c.py": "import time\nimport pytest\n\n\n@pytest.mark.run_first" + _stamp("c_first") + _stamp("c_later"),
}  # fmt: skip


@pytest.mark.parametrize(
    "history", ["configured", "sent", ""], ids=["history", "history-where-results-go", "no-history"]
)
def test_files_start_longest_first_and_run_first_stays_first(tmp_path: Path, shared_head: Head, history: str) -> None:
    """With history: read from the configured results dir, or (`sent`) from unit_results/ of
    `--unit-results-dir`, where the runs of that command line record themselves."""
    root = make_project(tmp_path, ORDER_FILES)
    results = ["--unit-results-dir", "elsewhere"] if history == "sent" else []
    if history:
        tests = ["a::test_a0", "a::test_a1", "a::test_a2", "b::test_b", "c::test_c_first", "c::test_c_later"]
        record = {
            "exit_status": 0, "start_time": "2026-01-01 00:00:00", "metrics": {},
            "tests": {f"tests/test_{t.replace('::', '.py::')}": {"outcome": "passed", "duration": 40.0 if t.startswith("b") else 1.0}
                      for t in tests},
        }  # fmt: skip
        dated = root / ("elsewhere" if results else "out") / "unit_results"
        dated.mkdir(parents=True)
        (dated / "20260101_000000.json").write_text(json.dumps(record))
    proc = run_pytest(root, "-n", "1", *results, env=env_for(root, shared_head), timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    order = sorted(
        (int((root / f).read_text()), f.removeprefix("start_")) for f in os.listdir(root) if f.startswith("start_")
    )
    expected = (
        ["c_first", "c_later", "b", "a0", "a1", "a2"] if history else ["c_first", "c_later", "a0", "a1", "a2", "b"]
    )
    assert [name for _, name in order] == expected, proc.stdout
    how = "longest first by their recorded durations" if history else "largest first (no history)"
    assert f"--dist loadfile, {how}" in proc.stdout


def test_barrier_waits_for_every_marker(tmp_path: Path) -> None:
    markers = [barrier.done_marker(tmp_path, n) for n in ("a::x", "b::y")]
    assert markers[0] != markers[1]
    assert barrier.wait_for_markers(markers, timeout_s=0.3, poll_s=0.05) == markers
    markers[0].touch()
    assert barrier.wait_for_markers(markers, timeout_s=0.3, poll_s=0.05) == markers[1:]
    markers[1].touch()
    assert barrier.wait_for_markers(markers, timeout_s=0) == []


def test_next_file_is_the_longest_unless_the_worker_is_still_busy() -> None:
    queued = ["long.py", "mid.py", "short.py"]  # longest first
    assert xdist_schedule.next_file(queued, worker_left_s=0.0, run_first_files=set()) == "long.py"
    assert xdist_schedule.next_file(queued, worker_left_s=xdist_schedule.BUSY_S, run_first_files=set()) == "long.py"
    assert xdist_schedule.next_file(queued, worker_left_s=60.0, run_first_files=set()) == "short.py"
    # A queued run_first file keeps the order: every other test waits for it.
    assert xdist_schedule.next_file(queued, worker_left_s=60.0, run_first_files={"long.py"}) == "long.py"
    assert xdist_schedule.next_file(queued, worker_left_s=60.0, run_first_files={"done.py"}) == "short.py"


def _where(name: str, sleep_s: float = 0) -> str:
    return textwrap.dedent(f"""
        import os, time


        def test_{name}():
            start = time.time()
            time.sleep({sleep_s})
            open("ran_{name}", "w").write(f"{{os.environ['PYTEST_XDIST_WORKER']}} {{start}} {{time.time()}}")
    """)


# Recorded: long 60 s, mid1/mid2 20 s, s1-s3 0.1 s. xdist alone queues mid2 behind the long
# test at the start (a worker gets more work with two tests left); the harness gives the busy
# worker the shortest file instead, and mid2 to the worker that frees up first.
BUSY_FILES = {
    "tests/test_long.py": _where("long", sleep_s=3),
    **{f"tests/test_{n}.py": _where(n) for n in ("mid1", "mid2", "s1", "s2", "s3")},
}
BUSY_RECORD = {"long": 60.0, "mid1": 20.0, "mid2": 20.0, "s1": 0.1, "s2": 0.1, "s3": 0.1}


def test_a_worker_busy_with_a_long_test_gets_the_shortest_file_next(tmp_path: Path, shared_head: Head) -> None:
    root = make_project(tmp_path, BUSY_FILES)
    record = {
        "exit_status": 0, "start_time": "2026-01-01 00:00:00", "metrics": {},
        "tests": {f"tests/test_{n}.py::test_{n}": {"outcome": "passed", "duration": d} for n, d in BUSY_RECORD.items()},
    }  # fmt: skip
    (root / "out" / "unit_results").mkdir(parents=True)
    (root / "out" / "unit_results" / "20260101_000000.json").write_text(json.dumps(record))
    proc = run_pytest(root, "-n", "2", env=env_for(root, shared_head), timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    ran = {}
    for name in BUSY_RECORD:
        worker, start, end = (root / f"ran_{name}").read_text().split()
        ran[name] = (worker, float(start), float(end))
    long_worker, _, long_end = ran["long"]
    after_long = sorted(n for n, (w, start, _) in ran.items() if w == long_worker and n != "long")
    assert ran["mid2"][0] != long_worker, ran  # not queued behind the long test
    assert ran["mid2"][2] < long_end, ran  # done while the long test still ran
    assert after_long and all(n.startswith("s") for n in after_long), ran  # only short files waited
