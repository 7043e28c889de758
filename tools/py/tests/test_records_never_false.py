"""The record is never false (issue 35, item 3): a forked child of a test never runs the
session's end, a record that cannot be written fails the run with one line and leaves no
earlier record looking current, a thread still tracking cannot break the write, and run_unit's
last line says what really stopped the run.

Every run is a real pytest (or tests/run_unit.sh) subprocess: real os.fork, real signals (the
end-of-run sweep's SIGTERM), real write failures (a file where a directory should be, a file
size limit, and where mount is allowed a full and a read-only tmpfs), a real thread.
"""

from __future__ import annotations

import json
import os
import re
import resource
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from records_project import joining, read_results, run_env, write_project
from xdist_project import Head

RUN_UNIT = Path(__file__).resolve().parents[3] / "tests" / "run_unit.sh"  # this repository's


def _run(
    root: Path, *args: str, unit: bool = False, fsize: int | None = None, ray: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """pytest (or run_unit.sh with `unit`) on the project at `root`; `fsize`: a file size limit
    for the run (RLIMIT_FSIZE: a write past it fails with EFBIG, as on a full disk); `ray`: the
    variables that join a cluster (records_project.joining)."""

    def limit() -> None:
        if fsize is not None:
            resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))

    cmd = ["bash", str(RUN_UNIT)] if unit else [sys.executable, "-m", "pytest"]
    return subprocess.run(
        [*cmd, "-p", "no:randomly", *args], cwd=root, env={**run_env(root), **(ray or {})}, capture_output=True, text=True,
        timeout=300, preexec_fn=limit,
    )  # fmt: skip


def _out(proc: subprocess.CompletedProcess[str]) -> str:
    return proc.stdout + proc.stderr


def _last_line(proc: subprocess.CompletedProcess[str]) -> str:
    """run_unit's closing line: on stdout when the run passed, else on stderr."""
    return [line for line in (proc.stderr if proc.returncode else proc.stdout).splitlines() if line.strip()][-1]


def _dated(root: Path, results_dir: str = "out") -> list[Path]:
    return sorted((root / results_dir / "unit_results").glob("*.json"))


# --- a child forked by a test -------------------------------------------------------------

OUTLIVING_CHILD = """
import os, time

def test_before(tracker):
    tracker.track("v", 1)

def test_forks(tracker):
    pid = os.fork()
    if pid == 0:  # outlives the run: the end-of-run sweep sends it SIGTERM
        time.sleep(120)
        os._exit(0)
    tracker.track("child", pid)

def test_after():
    pass
"""


def test_a_forked_child_that_outlives_the_run_is_stopped_without_touching_the_record(tmp_path: Path) -> None:
    # The issue: the sweep's SIGTERM made the child finish pytest's session, overwriting the
    # record with exit_status 2 and half the tests and adding a second dated file.
    root = write_project(tmp_path, {"tests/test_fork.py": OUTLIVING_CHILD})
    proc = _run(root, unit=True)
    assert proc.returncode == 0, _out(proc)
    child = read_results(root)["metrics"]["test_fork::test_forks"]["child"]
    assert f"stopped 1 process(es) the run left behind: python (pid {child})" in proc.stderr
    assert _last_line(proc) == "run_unit: all selected tests passed"
    assert "Interrupted" not in _out(proc)
    # The child is gone: the sweep's SIGTERM ended it at once (its handler was not the run's).
    assert not psutil.pid_exists(child) or psutil.Process(child).status() == psutil.STATUS_ZOMBIE
    doc = read_results(root)  # read after the child is gone: it wrote nothing
    assert doc["exit_status"] == 0
    assert sorted(doc["tests"]) == [f"tests/test_fork.py::test_{n}" for n in ("after", "before", "forks")]
    assert len(_dated(root)) == 1


RETURNING_CHILDREN = """
import os, sys
import pytest

def _fork_and_wait(tracker, child):
    pid = os.fork()
    if pid == 0:
        child()  # and then back into pytest: no os._exit
        return
    _, status = os.waitpid(pid, 0)
    tracker.track("child_exit", os.waitstatus_to_exitcode(status))

def _raise(exc):
    raise exc

@pytest.mark.parametrize("how", ["returns", "raises", "exits_7", "keyboard_interrupt"])
def test_child(tracker, how):
    _fork_and_wait(tracker, {
        "returns": lambda: None,
        "raises": lambda: _raise(RuntimeError("in the child")),
        "exits_7": lambda: sys.exit(7),
        "keyboard_interrupt": lambda: _raise(KeyboardInterrupt()),
    }[how])

@pytest.fixture
def forking_fixture(tracker):
    _fork_and_wait(tracker, lambda: None)  # the child returns from the fixture's set-up
    yield

def test_fixture_forks(forking_fixture):
    pass

def test_last():
    pass
"""


def test_a_forked_child_that_comes_back_into_pytest_ends_there(tmp_path: Path) -> None:
    # A child that returns, raises, sys.exit()s or gets a KeyboardInterrupt instead of calling
    # os._exit would otherwise run the rest of the session as if it were the run.
    root = write_project(tmp_path, {"tests/test_children.py": RETURNING_CHILDREN})
    proc = _run(root, "-s")
    assert proc.returncode == 0, _out(proc)
    doc = read_results(root)
    exits = {key.split("::")[1]: m["child_exit"] for key, m in doc["metrics"].items()}
    assert exits == {
        "test_child[returns]": 0, "test_child[raises]": 1, "test_child[exits_7]": 7,
        "test_child[keyboard_interrupt]": 2, "test_fixture_forks": 0,
    }  # fmt: skip
    assert {t["outcome"] for t in doc["tests"].values()} == {"passed"} and len(doc["tests"]) == 6
    assert len(_dated(root)) == 1
    assert proc.stderr.count("came back into pytest; it ends here") == 5
    assert "forked by tests/test_children.py::test_child[keyboard_interrupt], came back" in proc.stderr
    # No child printed a session summary of its own. (From Python 3.12 the summary also counts
    # warnings: fork() in a process with threads is a DeprecationWarning there.)
    assert len(re.findall(r"^=+ .*\b6 passed\b.* in [\d.]+s", proc.stdout, re.M)) == 1, proc.stdout


# --- a record that cannot be written --------------------------------------------------------

QUICK = {"tests/test_q.py": "def test_q(tracker):\n    tracker.track('v', 1)\n"}


def _passing_run(root: Path, *args: str) -> None:
    proc = _run(root, *args)
    assert proc.returncode == 0, _out(proc)


@pytest.mark.parametrize("blocked", ["results_dir_under_a_file", "results_dir_is_a_file", "dated_dir_is_a_file"])
def test_a_record_that_cannot_be_written_fails_the_run_with_one_line(tmp_path: Path, blocked: str) -> None:
    # Root (CI) writes through chmod: a file where a directory must be stops every user.
    root = write_project(tmp_path, QUICK)
    _passing_run(root)  # a previous record, which must not survive as if it were the new one
    assert (root / "out" / "unit_results.json").is_file()
    args: list[str] = []
    if blocked == "results_dir_under_a_file":
        (root / "afile").write_text("")
        args, target, blocking = ["--unit-results-dir=afile/out"], "afile/out/unit_results.json", "afile"
    elif blocked == "results_dir_is_a_file":
        (root / "afile").write_text("")
        args, target, blocking = ["--unit-results-dir=afile"], "afile/unit_results.json", "afile"
    else:
        for old in _dated(root):
            old.unlink()
        (root / "out" / "unit_results").rmdir()
        (root / "out" / "unit_results").write_text("")
        target, blocking = "out/unit_results/", "out/unit_results"
    proc = _run(root, *args)
    assert proc.returncode == 3, _out(proc)
    reason = f"{root / blocking} is a file, not a directory"
    lines = [line for line in _out(proc).splitlines() if line.startswith("testharness:")]
    assert len(lines) == 1 and lines[0].startswith(f"testharness: the unit results were not written: {root / target}")
    assert lines[0].endswith(f": {reason} (exit status 3)")
    assert "Traceback" not in _out(proc)
    if blocked == "dated_dir_is_a_file":
        # The latest record was written, then removed again as its dated copy failed; the
        # previous run's was removed at the start: nothing claims to be this run's record.
        assert not (root / "out" / "unit_results.json").exists()
        assert (root / "out" / "unit_results").read_text() == ""
    else:
        assert (root / "afile").read_text() == ""

    unit = _run(root, *args, unit=True)
    assert unit.returncode == 3, _out(unit)
    last = _last_line(unit)
    assert last.startswith(f"run_unit: FAILED: no results were written ({root / target}")
    assert last.endswith(f"{reason}); the tests: all selected tests passed")


def test_a_write_that_fails_midway_leaves_no_record_and_fails_the_run(tmp_path: Path) -> None:
    # A file size limit makes the big write fail part-way (EFBIG) as a full disk does (ENOSPC).
    root = write_project(
        tmp_path, {"tests/test_big.py": "def test_big(tracker):\n    tracker.track('v', 'x' * 300_000)\n"}
    )
    _passing_run(root)
    assert read_results(root)["exit_status"] == 0
    proc = _run(root, unit=True, fsize=200_000)
    assert proc.returncode == 3, _out(proc)
    assert "testharness: the unit results were not written: " in proc.stdout
    assert "File too large (exit status 3)" in proc.stdout
    assert _last_line(proc).startswith("run_unit: FAILED: no results were written (")
    assert not (root / "out" / "unit_results.json").exists()  # the previous run's is not left as current
    assert len(_dated(root)) == 1  # the previous run's dated copy: history, true as it is
    assert not [p for p in (root / "out").rglob(".*.tmp")]  # no half-written temp file either


@pytest.fixture
def tiny_tmpfs(tmp_path: Path) -> Iterator[Path]:
    """A 1 MiB tmpfs: a disk that can really be filled and made read-only (needs mount rights)."""
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mnt)], capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.skip(f"mount refused here (a tmpfs is how a full or read-only disk is made): {proc.stderr.strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def _fill(mnt: Path) -> None:
    fd = os.open(mnt / "filler", os.O_WRONLY | os.O_CREAT)
    try:
        while os.write(fd, b"\0" * 65536):
            pass
    except OSError:  # ENOSPC: full
        pass
    finally:
        os.close(fd)


def test_on_a_full_disk_and_a_read_only_one_the_run_fails_and_says_so(tmp_path: Path, tiny_tmpfs: Path) -> None:
    (tmp_path / "project").mkdir()
    root = write_project(tmp_path / "project", QUICK)
    results_dir = f"--unit-results-dir={tiny_tmpfs / 'out'}"
    _passing_run(root, results_dir)
    latest = tiny_tmpfs / "out" / "unit_results.json"
    assert latest.is_file()

    _fill(tiny_tmpfs)
    full = _run(root, results_dir, unit=True)
    assert full.returncode == 3, _out(full)
    assert "No space left on device (exit status 3)" in full.stdout
    assert _last_line(full).startswith("run_unit: FAILED: no results were written (")
    assert not latest.exists()  # the previous run's record does not stay as if current
    (tiny_tmpfs / "filler").unlink()

    _passing_run(root, results_dir)
    subprocess.run(["mount", "-o", "remount,ro", str(tiny_tmpfs)], check=True)
    read_only = _run(root, results_dir)
    assert read_only.returncode == 3, _out(read_only)
    # Nothing could be removed either: the line says the file there is an earlier run's.
    assert (
        f"testharness: the unit results were not written: {latest}: Read-only file system; "
        f"{latest} is an earlier run's record, not this one's (exit status 3)"
    ) in read_only.stdout


# --- a thread still tracking as the session ends ------------------------------------------------

TRACKING_THREAD = """
import threading, time

def test_leaves_a_tracking_thread(tracker):
    def keep_tracking():
        i = 0
        while True:  # a daemon thread: still adding metrics when the session writes the record
            tracker.track(f"late{i}", i)
            i += 1
            time.sleep(0.0005)
    for i in range(20000):
        tracker.track(f"m{i}", i)
    threading.Thread(target=keep_tracking, daemon=True).start()
"""


@pytest.mark.parametrize("xdist", [[], ["-n", "1"]], ids=["serial", "xdist"])
def test_a_thread_still_tracking_cannot_break_the_write(
    tmp_path: Path, xdist: list[str], request: pytest.FixtureRequest
) -> None:
    # It kept adding keys while the record was serialised: "dictionary changed size during
    # iteration", no results, exit 0. Several tests, so the write happens many times.
    files = {f"tests/test_t{i}.py": TRACKING_THREAD for i in range(4)}
    root = write_project(tmp_path, files)
    # Under -n its worker joins the module's Ray cluster (xdist_project.shared_head): the record's
    # write is what this looks at, not a cluster's start.
    proc = _run(root, *xdist, ray=joining(request.getfixturevalue("shared_head")) if xdist else None)
    assert proc.returncode == 0, _out(proc)
    assert "not written" not in _out(proc) and "Traceback" not in _out(proc)
    doc = read_results(root)
    assert len(doc["metrics"]) == 4
    assert all(len(m) >= 20001 for m in doc["metrics"].values())  # 20,000 metrics and _elapsed


# --- what stopped the run ---------------------------------------------------------------------


def test_a_stepwise_stop_is_named_as_such(tmp_path: Path) -> None:
    root = write_project(
        tmp_path, {"tests/test_s.py": "def test_a(): pass\ndef test_b(): assert False\ndef test_c(): pass\n"}
    )
    proc = _run(root, "--sw", unit=True)
    assert proc.returncode == 2, _out(proc)
    assert _last_line(proc) == (
        "run_unit: pytest stopped the run early: Test failed, continuing from this test next run.; "
        f"results of the tests that ran: {root / 'out' / 'unit_results.json'}"
    )
    assert "KeyboardInterrupt" not in _last_line(proc) and "Ctrl-C" not in _last_line(proc)
    assert read_results(root)["exit_status"] == 2


def test_a_test_that_crashes_its_xdist_worker_is_recorded_failed_as_the_terminal_says(
    tmp_path: Path, shared_head: Head
) -> None:
    root = write_project(
        tmp_path,
        {"tests/test_crash.py": "import os\n\ndef test_crash():\n    os.abort()\n\ndef test_ok():\n    pass\n"},
    )
    proc = _run(root, "-n", "1", "-p", "no:cacheprovider", ray=joining(shared_head))
    assert proc.returncode == 1, _out(proc)
    # The crash is one failure (the harness's scheduler never runs the crashed test again, and
    # the rest of its file runs on the replacement worker): one attempt recorded, as the
    # terminal's one "crashed while running" line says.
    assert proc.stdout.count("FAILED tests/test_crash.py::test_crash - worker 'gw") == 1, proc.stdout
    tests = read_results(root)["tests"]
    crashed = tests["tests/test_crash.py::test_crash"]
    assert crashed["outcome"] == "failed" and crashed["attempts"] == ["failed"]
    assert tests["tests/test_crash.py::test_ok"]["outcome"] == "passed"


def test_the_summary_names_the_written_record_only(tmp_path: Path) -> None:
    # run_unit's "results of the tests that ran: PATH" comes from it: never a path not written.
    root = write_project(tmp_path, QUICK)
    summary = tmp_path / "summary.json"
    env = run_env(root)
    env["TESTHARNESS_SUMMARY_FILE"] = str(summary)
    env["TESTHARNESS_SUPERVISOR_PID"] = str(os.getpid())  # taken by the pytest this process starts only
    (root / "afile").write_text("")
    for args, written in ((["--unit-results-dir=afile"], False), ([], True)):
        proc = subprocess.run(
            [sys.executable, "-m", "pytest", "-p", "no:randomly", *args], cwd=root, env=env,
            capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        data = json.loads(summary.read_text())
        assert data["exit_status"] == proc.returncode == (0 if written else 3)
        assert data["tests_exit_status"] == 0
        if written:
            assert data["results"] == str(root / "out" / "unit_results.json") and data["results_error"] is None
        else:
            assert data["results"] is None and "afile is a file, not a directory" in data["results_error"]
