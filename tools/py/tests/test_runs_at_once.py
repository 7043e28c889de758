"""Two `tests/run_unit.sh` at once in one checkout (issue 56): each run's JUnit file, step
summary and history entry come from its own record, never from the latest `unit_results.json`
that the other run may have replaced; the latest is the record of the run that ended last."""

from __future__ import annotations

import json
import subprocess
import time
import xml.etree.ElementTree as ET
from datetime import datetime
from pathlib import Path

import pytest
from records_project import RUN_UNIT, run_env, write_project

from testharness import record_files

# A test of the first run leaves a thread that keeps its pytest alive after the session wrote the
# record, until the outer test lets it go: the second run writes its record in that gap, so the
# first run's supervisor, reading after it, finds the other run's `unit_results.json`.
LINGER = """
import os, pathlib, threading, time

def _linger():
    where = os.environ.get("LINGER_DIR")
    if where:
        def wait():
            deadline = time.monotonic() + 120
            while not pathlib.Path(where, "go").exists() and time.monotonic() < deadline:
                time.sleep(0.05)
        threading.Thread(target=wait, name="linger").start()  # not a daemon: Python's exit waits
"""
FILES = {
    "tests/test_pass.py": LINGER + "\ndef test_passes():\n    _linger()\n",
    "tests/test_fail.py": LINGER + "\ndef test_fails():\n    _linger()\n    assert False, 'fails on purpose'\n",
}
TESTS = {"pass": "tests/test_pass.py::test_passes", "fail": "tests/test_fail.py::test_fails"}


def _start(root: Path, name: str, linger: Path | None) -> subprocess.Popen[str]:
    env = {**run_env(root), "GITHUB_STEP_SUMMARY": str(root / f"{name}.md")}
    if linger is not None:
        env["LINGER_DIR"] = str(linger)
    cmd = ["bash", str(RUN_UNIT), "-p", "no:randomly", "-p", "no:cacheprovider", f"tests/test_{name}.py"]
    return subprocess.Popen(cmd + ["--junitxml", f"out/{name}.xml"], cwd=root, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)  # fmt: skip


@pytest.mark.parametrize("first", ["pass", "fail"])
def test_two_runs_at_once_each_write_their_own_files(tmp_path: Path, first: str) -> None:
    (tmp_path / "proj").mkdir()
    root = write_project(tmp_path / "proj", FILES)
    history = root / "out" / "unit_results"
    second = "fail" if first == "pass" else "pass"
    linger = tmp_path / "linger"
    linger.mkdir()
    early = _start(root, first, linger)
    deadline = time.monotonic() + 120
    while not list(history.glob("*.json")):  # the first run's record is written; its pytest lingers
        assert early.poll() is None and time.monotonic() < deadline, early.communicate()[0]
        time.sleep(0.05)
    late = _start(root, second, None)
    late_out = late.communicate(timeout=240)[0]  # it writes unit_results.json over the first's
    (linger / "go").touch()
    early_out = early.communicate(timeout=240)[0]
    codes = {first: early.returncode, second: late.returncode}
    assert codes == {"pass": 0, "fail": 1}, early_out + late_out

    for name, nodeid in TESTS.items():
        suite = ET.parse(root / "out" / f"{name}.xml").getroot().find("testsuite")
        assert suite is not None
        assert [c.get("name") for c in suite.iter("testcase")] == [nodeid.split("::")[1]]  # its own test only
        assert suite.get("failures") == ("1" if name == "fail" else "0")
        summary = (root / f"{name}.md").read_text()
        assert ("FAILED" in summary) == (name == "fail"), summary  # its own verdict
        assert ("fails</code>" in summary) == (name == "fail"), summary  # its own tests (ids escaped)

    records = [json.loads(p.read_text()) for p in sorted(history.glob("*.json"))]
    assert sorted((list(r["tests"]), r["exit_status"]) for r in records) == [  # one dated record per run
        ([TESTS["fail"]], 1),
        ([TESTS["pass"]], 0),
    ]
    latest = json.loads((root / "out" / "unit_results.json").read_text())
    assert list(latest["tests"]) == [TESTS[second]]  # the record written last


def test_an_amended_exit_status_touches_only_the_runs_own_files(tmp_path: Path) -> None:
    mine, theirs = {"exit_status": 5, "tests": {"a": {}}}, {"exit_status": 1, "tests": {"b": {}}}
    latest, _ = record_files.write_results(tmp_path, mine, _start_time(0))
    own = sorted((tmp_path / "unit_results").glob("*.json"))[0]
    assert record_files.amend_written(latest, own, 0)  # still this run's: both files say 0
    assert json.loads(latest.read_text())["exit_status"] == json.loads(own.read_text())["exit_status"] == 0

    _, other = record_files.write_results(tmp_path, theirs, _start_time(1))  # another run ended since
    assert record_files.amend_written(latest, own, 2)
    assert json.loads(own.read_text()) == {**mine, "exit_status": 2}
    assert json.loads(latest.read_text()) == theirs == json.loads(other.read_text())  # theirs untouched
    assert not record_files.amend_written(latest, own, 2)  # already says so: nothing rewritten


def _start_time(second: int) -> datetime:
    return datetime(2026, 12, 7, 12, 0, second)
