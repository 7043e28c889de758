"""`-n` with tests that kill their xdist worker (issue 35, item 4): the crashed test is recorded
failed once and never run again, the rest of its file runs on another worker, each test once,
other files go on, and the run exits 1, never in INTERNALERROR.

Real pytest-xdist runs (joining a Ray cluster a helper process holds), real crashes: a
segfault (`ctypes.string_at(0)`), `os._exit(0)` and SIGKILL. The three crashes once with a
results history (the harness's longest-first scheduler) and once without (crash-safe loadfile in
xdist's order); the two narrower cases in one of the two each, as both share requeue_after_crash
and the crash hook that releases the run_first barrier.
Every test appends its worker's name to `ran_<test>`, so a file of one line is one run.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections import OrderedDict
from pathlib import Path

import pytest
from xdist_project import PLUGIN, Head, env_for, make_project, results_of

from testharness.xdist_schedule import requeue_after_crash

RAN = """
import ctypes, os, signal

import pytest


def ran(name):
    with open(f"ran_{name}", "a") as f:
        f.write(os.environ["PYTEST_XDIST_WORKER"] + "\\n")
"""


def _file(tests: dict[str, str]) -> str:
    """A test file: each test records that it ran, then runs its line ("@mark\\nline": with a
    decorator)."""
    parts = [RAN]
    for name, body in tests.items():
        deco, _, line = body.rpartition("\n")
        parts.append(f"\n\n{deco}\ndef test_{name}():\n    ran({name!r})\n    {line}\n")
    return "".join(parts)


SEGFAULT, EXIT, SIGKILL = "ctypes.string_at(0)", "os._exit(0)", "os.kill(os.getpid(), signal.SIGKILL)"


def _with_history(root: Path, nodeids: list[str]) -> None:
    """A previous run's record: the controller schedules with recorded durations."""
    record = {
        "exit_status": 0, "start_time": "2026-01-01 00:00:00", "metrics": {},
        "tests": {n: {"outcome": "passed", "duration": 2.0 + i % 3} for i, n in enumerate(nodeids)},
    }  # fmt: skip
    (root / "out" / "unit_results").mkdir(parents=True)
    (root / "out" / "unit_results" / "20260101_000000.json").write_text(json.dumps(record))


def _run(
    tmp_path: Path, head: Head, files: dict[str, dict[str, str]], history: bool, workers: int = 2
) -> tuple[Path, str]:
    root = make_project(tmp_path, {f"tests/{f}.py": _file(tests) for f, tests in files.items()})
    nodeids = [f"tests/{f}.py::test_{t}" for f, tests in files.items() for t in tests]
    if history:
        _with_history(root, nodeids)
    returncode, out = _pytest(root, env_for(root, head), workers)
    assert returncode == 1, out  # tests failed: not 2 (interrupted) nor 3 (internal error)
    assert "INTERNALERROR" not in out and "Traceback" not in out.split("= FAILURES =")[0], out
    order = "longest first by their recorded durations" if history else "largest first (no history)"
    assert f"files are distributed with --dist loadfile, {order}" in out, out
    recorded = results_of(root)
    assert sorted(recorded["tests"]) == sorted(nodeids), out  # every test recorded
    assert recorded["exit_status"] == 1
    return root, out


def _pytest(root: Path, env: dict[str, str], workers: int, timeout_s: float = 600) -> tuple[int, str]:
    """`pytest -n <workers>` in `root`: its exit status and output. A run still going after `timeout_s`
    (a worker that never gets its work, a barrier that waits on a crashed test) is ended, and
    the test fails with what it printed. 12 s here as a rule; a loaded CI box with two
    containers beside it took over 240 s (each crash starts a new worker, which imports the
    plugins and joins Ray again), so the guard is far above that."""
    log = root / f"pytest_n{workers}.log"
    cmd = [sys.executable, "-m", "pytest", *PLUGIN, "-v", "-rA", "-n", str(workers), "-p", "no:randomly"]
    with log.open("w") as out:
        proc = subprocess.Popen(cmd, cwd=root, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            returncode = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)  # the run's own process group: its workers too
            proc.wait()
            pytest.fail(f"pytest -n {workers} still running after {timeout_s:g} s:\n{log.read_text()[-20000:]}")
    return returncode, log.read_text()


def _workers(root: Path, test: str) -> list[str]:
    """The workers that ran `test`, one per run."""
    return (root / f"ran_{test}").read_text().split()


def _assert_crashed(root: Path, out: str, nodeid: str) -> None:
    """Run once, recorded failed once, as xdist's crash report on the terminal says."""
    [worker] = _workers(root, nodeid.rsplit("::test_", 1)[1])
    assert f"worker '{worker}' crashed while running '{nodeid}'" in out, out
    # Once in the failures section (the short summary repeats it, cut or not by the terminal's width)
    crashes = [
        ln for ln in out.splitlines() if ln.startswith("worker '") and ln.endswith(f"crashed while running '{nodeid}'")
    ]
    assert len(crashes) == 1, out
    entry = results_of(root)["tests"][nodeid]
    assert entry["outcome"] == "failed" and entry["attempts"] == ["failed"], entry


def test_the_rest_of_a_crashed_file_runs_on_a_fresh_worker_once(tmp_path: Path, shared_head: Head) -> None:
    tests = {str(i): "" for i in range(1, 7)}
    tests["3"] = SEGFAULT
    root, out = _run(tmp_path, shared_head, {"test_six": tests}, history=False)
    _assert_crashed(root, out, "tests/test_six.py::test_3")
    ran = {t: _workers(root, t) for t in tests}
    assert all(len(workers) == 1 for workers in ran.values()), ran  # each test once
    crashed = ran["3"][0]
    assert ran["1"] == ran["2"] == [crashed], ran  # one file: one worker, until it crashed
    # One file, so one worker (the plan: no more workers than files): the rest ran on the
    # replacement xdist started for it.
    assert ran["4"] == ran["5"] == ran["6"] == ["gw1"] != [crashed], ran
    outcomes = {k.rsplit("::test_", 1)[1]: v["outcome"] for k, v in results_of(root)["tests"].items()}
    assert outcomes == {"1": "passed", "2": "passed", "3": "failed", "4": "passed", "5": "passed", "6": "passed"}
    assert "1 failed, 5 passed" in out, out


@pytest.mark.parametrize("history", [True, False], ids=["history", "no-history"])
def test_three_crashes_in_two_files_and_every_test_runs_once(tmp_path: Path, shared_head: Head, history: bool) -> None:
    files = {
        "test_a": {"a1": "", "a2": SEGFAULT, "a3": "", "a4": EXIT, "a5": ""},
        "test_b": {"b1": "", "b2": SIGKILL, "b3": "", "b4": ""},
        "test_c": {f"c{i}": "" for i in range(1, 5)},
    }
    root, out = _run(tmp_path, shared_head, files, history)
    crashes = {"tests/test_a.py::test_a2", "tests/test_a.py::test_a4", "tests/test_b.py::test_b2"}
    for nodeid in crashes:
        _assert_crashed(root, out, nodeid)
    ran = {t: _workers(root, t) for tests in files.values() for t in tests}
    assert all(len(workers) == 1 for workers in ran.values()), ran  # each test once
    # After each crash the rest of its file ran on another worker.
    assert ran["a3"] != ran["a2"] and ran["a5"] != ran["a4"] and ran["b3"] != ran["b2"], ran
    outcomes = {k: v["outcome"] for k, v in results_of(root)["tests"].items()}
    assert {k for k, v in outcomes.items() if v == "failed"} == crashes, outcomes
    assert set(outcomes.values()) == {"passed", "failed"}
    assert "3 failed, 10 passed" in out, out


@pytest.mark.parametrize("history", [True, False], ids=["history", "no-history"])
def test_the_one_test_left_of_a_crashed_file_runs_while_another_file_waits(
    tmp_path: Path, shared_head: Head, history: bool
) -> None:
    # One worker: test_b is queued behind test_a, the crash leaves one test of test_a; the
    # replacement worker must not wait for a second test with that one (it hung: CI at e4c53d9).
    files = {"test_a": {"a1": "", "a2": EXIT, "a3": ""}, "test_b": {"b1": "", "b2": ""}}
    root, out = _run(tmp_path, shared_head, files, history, workers=1)
    _assert_crashed(root, out, "tests/test_a.py::test_a2")
    ran = {t: _workers(root, t) for tests in files.values() for t in tests}
    assert ran == {"a1": ["gw0"], "a2": ["gw0"], "a3": ["gw1"], "b1": ["gw1"], "b2": ["gw1"]}, ran
    assert "1 failed, 4 passed" in out, out


def test_a_run_first_test_that_crashes_holds_no_other_test_back(tmp_path: Path, shared_head: Head) -> None:
    # Every other test waits for the run_first tests to finish (up to an hour): a crashed one
    # has finished.
    files = {
        "test_first": {"first": f"@pytest.mark.run_first\n{SEGFAULT}", "after": ""},
        "test_other": {"o1": "", "o2": ""},
    }
    root, out = _run(tmp_path, shared_head, files, history=True)
    _assert_crashed(root, out, "tests/test_first.py::test_first")
    assert all(len(_workers(root, t)) == 1 for t in ("after", "o1", "o2"))
    assert "1 failed, 3 passed" in out, out


def test_a_dead_workers_rest_goes_to_the_front_without_its_crashed_test() -> None:
    workload = {
        "done.py": {"done.py::t1": True},  # finished before the crash: not queued again
        "a.py": {"a.py::t1": True, "a.py::t2": False, "a.py::t3": False},  # crashed in t2
        "b.py": {"b.py::t1": False},  # queued on the dead worker, not started
    }
    queue = OrderedDict({"c.py": {"c.py::t1": False}})
    assert requeue_after_crash(workload, queue) == ("a.py::t2", ["a.py", "b.py"])
    assert list(queue) == ["a.py", "b.py", "c.py"]
    assert queue["a.py"] == {"a.py::t1": True, "a.py::t2": True, "a.py::t3": False}  # t2: never again
    # A worker that ended with nothing left to run (a normal finish) changes nothing.
    assert requeue_after_crash({"done.py": {"done.py::t1": True}}, queue) == (None, [])
    assert list(queue) == ["a.py", "b.py", "c.py"]
