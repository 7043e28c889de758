"""A native crash or hang costs one test, never the record (issue 35, items 1 and 2): run_unit's
supervisor names the test a dead pytest was in, records it with the cause and the stacks,
goes on with the tests not yet run, and ends stuck tests its in-process watchdog could not.

Every run is tests/run_unit.sh on a throwaway project: a real segfault (ctypes.string_at(0)),
a real os._exit, a real C call holding the GIL (catastrophic backtracking in `re`), real
pytest-xdist workers, real py-spy.
"""

from __future__ import annotations

import collections
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from records_project import joining_under_xdist, read_results, run_env, run_unit_sh, write_project

from testharness import crash_record
from testharness.record import Record

THIRTY = """
import ctypes, os, re
import pytest

@pytest.mark.parametrize("i", range(1, 31))
def test_n(i, tracker):
    tracker.track("i", i)
    if i == 10:
        ctypes.string_at(0)  # SIGSEGV
    if i == 20:
        os._exit(0)
    if i == 25:
        re.match(r"(a*)*b", "a" * 40)  # C code that holds the GIL for hours: no signal, no thread gets in
"""

HYGIENE_TIMEOUT = "\n[tool.testharness.hygiene]\ntimeout = 5\n"


def _project(tmp_path: Path, files: dict[str, str], timeout: bool = False) -> Path:
    root = write_project(tmp_path, files)
    if timeout:
        with (root / "pyproject.toml").open("a") as fh:
            fh.write(HYGIENE_TIMEOUT)
    return root


def _dated(root: Path) -> list[Path]:
    return sorted((root / "out" / "unit_results").glob("*.json"))


@pytest.mark.parametrize("xdist", [[], ["-n", "2"]], ids=["serial", "xdist"])
def test_three_crashes_in_thirty_tests_cost_three_tests_and_leave_one_record(
    tmp_path: Path, xdist: list[str], request: pytest.FixtureRequest
) -> None:
    root = _project(tmp_path, {"tests/test_thirty.py": THIRTY}, timeout=True)
    started = time.monotonic()
    proc = run_unit_sh(root, *xdist, **joining_under_xdist(request, xdist))
    took = time.monotonic() - started
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out
    assert "INTERNALERROR" not in out
    doc = read_results(root)
    assert len(_dated(root)) == 1 and json.loads(_dated(root)[0].read_text()) == doc  # ONE record
    tests = doc["tests"]
    assert len(tests) == 30 and doc["exit_status"] == 1
    outcomes = collections.Counter(t["outcome"] for t in tests.values())
    assert outcomes == {"passed": 27, "failed": 3}, tests
    assert all(t["attempts"] == ["passed"] for t in tests.values() if t["outcome"] == "passed")  # each ran once
    crash = {i: tests[f"tests/test_thirty.py::test_n[{i}]"]["crash"] for i in (10, 20, 25)}
    assert "Segmentation fault" in crash[10]["cause"]
    assert "test_thirty.py" in crash[10]["stack"]  # faulthandler's stack of the dead test
    assert "os._exit" in crash[20]["cause"]
    assert crash[25]["cause"].startswith("timeout:") and "killed from outside" in crash[25]["cause"]
    assert "test_n (test_thirty.py:" in crash[25]["stack"], crash[25]["stack"]  # py-spy's dump of the stuck test
    assert "match (re/__init__.py:" in crash[25]["stack"], crash[25]["stack"]  # where it is stuck
    # (py-spy --native adds the C frames, sre_ucs1_match, where the interpreter keeps its symbols)
    assert sorted(doc["metrics"]) == sorted(f"test_thirty::test_n[{i}]" for i in range(1, 31) if i not in (10, 20, 25))
    if not xdist:  # each crash is named as it happens, and the run goes on
        assert "run_unit: CRASHED: tests/test_thirty.py::test_n[10]: killed by SIGSEGV" in out
        assert "going on with the 20 test(s) not run yet" in out
    assert "test_thirty.py::test_n[25] is stuck 5 s past its 5 s timeout" in out
    print(f"{'xdist' if xdist else 'serial'} run of 30 tests with 3 crashes: {took:.1f} s")


LAST_DIES = """
import os

def test_one(tracker):
    tracker.track("v", 1)

def test_two():
    pass

def test_three():
    os._exit(3)
"""


def test_a_crash_in_the_last_test_is_recorded_by_the_supervisor(tmp_path: Path) -> None:
    # Before: os._exit(3) said "internal error", named no test and left no results.
    root = _project(tmp_path, {"tests/test_last.py": LAST_DIES})
    proc = run_unit_sh(root)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "run_unit: CRASHED: tests/test_last.py::test_three: the process exited with code 3" in proc.stderr
    doc = read_results(root)
    assert doc["exit_status"] == 1 and len(_dated(root)) == 1
    assert {k: v["outcome"] for k, v in doc["tests"].items()} == {
        "tests/test_last.py::test_one": "passed",
        "tests/test_last.py::test_two": "passed",
        "tests/test_last.py::test_three": "failed",
    }
    assert doc["tests"]["tests/test_last.py::test_three"]["key"] == "test_last::test_three"
    assert doc["metrics"]["test_last::test_one"]["v"] == 1
    assert doc["coverage"] == "not measured: the test process died"
    assert "run_unit: FAILED" in proc.stderr.splitlines()[-1]


POISONS = """
import os

def test_before():
    pass

def test_poisons():
    # The text torch raises after a device-side assert; on a GPU: tools/py/tests/test_gpu_crash.py
    raise RuntimeError("CUDA error: device-side assert triggered\\nCUDA kernel errors might be reported later")

def test_after(tracker):
    tracker.track("pid", os.getpid())
"""


def test_after_a_sticky_cuda_error_the_run_goes_on_in_a_fresh_process(tmp_path: Path) -> None:
    root = _project(tmp_path, {"tests/test_cuda.py": POISONS})
    proc = run_unit_sh(root)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "test_poisons left the test process's CUDA context unusable (CUDA error: device-side assert" in proc.stderr
    doc = read_results(root)
    assert {k.rpartition("::")[2]: v["outcome"] for k, v in doc["tests"].items()} == {
        "test_before": "passed", "test_poisons": "failed", "test_after": "passed"}  # fmt: skip
    crash = doc["tests"]["tests/test_cuda.py::test_poisons"]["crash"]
    assert crash["cause"].startswith("CUDA error: device-side assert triggered: the CUDA context")
    assert "RuntimeError" in crash["stack"]
    assert len(_dated(root)) == 1


SHARDED = """
import os
import pytest

@pytest.mark.parametrize("i", range(8))
def test_s(i, request):
    if os.environ.get("CRASH_AT") == request.node.nodeid:
        os._exit(0)
"""


def test_a_shard_goes_on_with_its_own_tests_only(tmp_path: Path) -> None:
    # The continuation filters after --shard has planned the shard over the whole selection.
    root = _project(tmp_path, {"tests/test_sharded.py": SHARDED})
    assert run_unit_sh(root, "--shard", "1/2").returncode == 0
    shard = list(read_results(root)["tests"])
    assert 0 < len(shard) < 8
    proc = run_unit_sh(root, "--shard", "1/2", CRASH_AT=shard[0])
    assert proc.returncode == 1, proc.stdout + proc.stderr
    doc = read_results(root)
    assert list(doc["tests"]) == shard and doc["shard"] == "1/2"
    assert [t["outcome"] for t in doc["tests"].values()] == ["failed"] + ["passed"] * (len(shard) - 1)


def test_with_x_the_run_stops_at_the_crash(tmp_path: Path) -> None:
    root = _project(tmp_path, {"tests/test_x.py": "import os\n\ndef test_a(): pass\n\ndef test_b(): os._exit(0)\n\n"
                                                 "def test_c(): pass\n"})  # fmt: skip
    proc = run_unit_sh(root, "-x")
    assert proc.returncode == 1
    assert "going on" not in proc.stderr
    assert {k: v["outcome"] for k, v in read_results(root)["tests"].items()} == {
        "tests/test_x.py::test_a": "passed",
        "tests/test_x.py::test_b": "failed",
    }


def test_a_crash_during_collection_is_named_and_nothing_is_recorded_as_run(tmp_path: Path) -> None:
    root = _project(
        tmp_path, {"tests/test_ok.py": "def test_ok(): pass\n", "tests/test_dies.py": "import os\nos._exit(0)\n"}
    )
    proc = run_unit_sh(root)
    assert proc.returncode == 3
    assert (
        proc.stderr.splitlines()[-1]
        == "run_unit: FAILED: pytest died before its tests were collected (it exited with code 0)"
    )
    assert not (root / "out" / "unit_results.json").exists()


def test_a_plain_pytest_run_is_not_supervised(tmp_path: Path) -> None:
    # Without run_unit the plugin changes nothing: pytest's own faulthandler prints to stderr.
    root = _project(tmp_path, {"tests/test_seg.py": "import ctypes\n\ndef test_seg(): ctypes.string_at(0)\n"})
    env = run_env(root)
    proc = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:randomly"], cwd=root, env=env,
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert proc.returncode < 0 and "Fatal Python error: Segmentation fault" in proc.stderr
    assert not (root / "out" / "unit_results.json").exists()


# --- the files between the plugin and the supervisor (pure) --------------------------------------


def test_the_journal_skips_a_line_torn_by_a_dying_process(tmp_path: Path) -> None:
    crash_record.append_line(tmp_path / crash_record.JOURNAL, {"selected": ["a", "b"]})
    crash_record.append_line(
        tmp_path / crash_record.JOURNAL, {"test": "a", "record": {"key": "a", "outcome": "passed"}}
    )
    with (tmp_path / crash_record.JOURNAL).open("a") as fh:
        fh.write('{"test": "b", "rec')  # died mid-write
    journal = crash_record.read_journal(tmp_path)
    assert journal.selected == ["a", "b"] and list(journal.finished) == ["a"]


def test_only_breadcrumbs_past_deadline_and_grace_are_overdue() -> None:
    crumbs = [
        crash_record.Breadcrumb("t1", "k1", 1, started=0.0, deadline=10.0),
        crash_record.Breadcrumb("t2", "k2", 2, started=0.0, deadline=20.0),
        crash_record.Breadcrumb("t3", "k3", 3, started=0.0, deadline=None),  # no timeout: never
    ]
    assert [c.nodeid for c in crash_record.overdue(crumbs, now=16.0, grace_s=5.0)] == ["t1"]
    assert crash_record.overdue(crumbs, now=15.0, grace_s=5.0) == []


def test_carried_rounds_keep_the_last_attempt_and_the_most_telling_memory_source() -> None:
    carried = Record()
    first = crash_record.Journal(session={"start": "2026-12-04 10:00:00"})
    first.finished["a"] = {"test": "a", "record": {"key": "ka", "outcome": "failed"}, "metrics": {"m": 1},
                           "memory": ["gpu", ["H200"]]}  # fmt: skip
    second = crash_record.Journal(session={"start": "2026-12-04 10:05:00"})
    second.finished["b"] = {"test": "b", "record": {"key": "kb", "outcome": "passed"}, "metrics": None,
                            "memory": ["rss", []]}  # fmt: skip
    carried.add_journal(first)
    carried.add_journal(second)
    assert carried.start_time() == "2026-12-04 10:00:00"  # the run's start: the first round's
    assert carried.memory_source == "gpu" and carried.gpu_names == {"H200"}
    assert carried.metrics == {"ka": {"m": 1}} and carried.failed()


def test_exit_causes_are_named() -> None:
    assert crash_record.exit_cause(-11) == "killed by SIGSEGV"
    assert "out-of-memory" in crash_record.exit_cause(-9)
    assert "exited with code 0" in crash_record.exit_cause(0)
    assert crash_record.fault_cause("Fatal Python error: Aborted\n\nCurrent thread") == "Aborted"
