"""The run record (testharness.record): one state, one writer (issue 52, item 1).

A normal session's record and the one run_unit's supervisor builds from that session's journal
(as it does when pytest dies) come out of the same `Record` methods: for one real pytest run
(serial, and under -n with real xdist workers) both documents are compared field by field.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from records_project import joining_under_xdist, read_results, run_env, write_project

from testharness import crash_record, results, supervisor
from testharness.crash_record import SUPERVISE_DIR_ENV, SUPERVISOR_PID_ENV, Breadcrumb, Journal
from testharness.record import Record

EVERY_OUTCOME = """
from pathlib import Path

import pytest

@pytest.fixture
def broken_teardown():
    yield
    raise RuntimeError("teardown")

@pytest.fixture
def broken_setup():
    raise RuntimeError("setup")

@pytest.mark.parametrize("i", range(3))
def test_passes(i, tracker):
    tracker.track("i", i)
    tracker.track("nested", {"a": [i, 2.5]})

def test_fails(tracker):
    tracker.track("before", 1)
    assert False

def test_skipped():
    pytest.skip("not here")

@pytest.mark.xfail(reason="known")
def test_xfailed():
    assert False

@pytest.mark.xfail(reason="known")
def test_xpassed():
    pass

def test_setup_error(broken_setup):
    pass

def test_teardown_error(broken_teardown, tracker):
    tracker.track("t", 3)

def test_flaky(tracker):
    marker = Path(__file__).parent / "flaky-ran"
    tracker.track("attempt", 2 if marker.exists() else 1)
    if not marker.exists():
        marker.write_text("")
        assert False, "first attempt"
"""


def _session(root: Path, journal_dir: Path, *args: str, **ray: str) -> subprocess.CompletedProcess[str]:
    """A normal pytest session of `root`, journaling as under run_unit's supervisor."""
    env = {**run_env(root), SUPERVISE_DIR_ENV: str(journal_dir), SUPERVISOR_PID_ENV: str(os.getpid()), **ray}
    cmd = [sys.executable, "-m", "pytest", "-p", "no:randomly", "-p", "no:cacheprovider", "--reruns", "1", *args]
    return subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True, timeout=240)


@pytest.mark.parametrize("xdist", [[], ["-n", "2"]], ids=["serial", "xdist"])
def test_the_supervisor_builds_from_the_journal_the_record_the_session_wrote(
    tmp_path: Path, xdist: list[str], request: pytest.FixtureRequest
) -> None:
    (tmp_path / "project").mkdir()
    root = write_project(tmp_path / "project", {"tests/test_every.py": EVERY_OUTCOME})
    proc = _session(root, tmp_path / "round1", *xdist, **joining_under_xdist(request, xdist))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    written = read_results(root)
    dated = sorted((root / "out" / "unit_results").glob("*.json"))
    assert len(dated) == 1 and json.loads(dated[0].read_text()) == written

    # What the supervisor does once no pytest is left to write the record: the journal in, the
    # record closed with the run's status (the same Record.close), the files written again.
    for path in (root / "out" / "unit_results.json", *dated):
        path.unlink()
    rebuilt = Record()
    rebuilt.add_journal(crash_record.read_journal(tmp_path / "round1"))
    outcome = supervisor.write_record(rebuilt, written["exit_status"], None)
    assert outcome.code == 1 and outcome.summary is not None
    assert outcome.summary["results"] == str(root / "out" / "unit_results.json")
    again = read_results(root)

    assert list(again) == list(written)  # the same keys, in the documented order
    same = [k for k in written if k not in ("coverage", "gpu_types")]
    assert {k: again[k] for k in same} == {k: written[k] for k in same}
    assert again["coverage"] == results.DIED_COVERAGE  # the session's own: pytest-cov's, or why not
    assert set(again["gpu_types"]) <= set(written["gpu_types"])  # the session also asks the machine
    assert len(list((root / "out" / "unit_results").glob("*.json"))) == 1

    tests = written["tests"]  # and the record is the run's, not two empty documents
    outcomes = {nodeid.rpartition("::")[2]: entry["outcome"] for nodeid, entry in tests.items()}
    assert outcomes == {
        "test_passes[0]": "passed", "test_passes[1]": "passed", "test_passes[2]": "passed",
        "test_fails": "failed", "test_skipped": "skipped", "test_xfailed": "xfailed", "test_xpassed": "xpassed",
        "test_setup_error": "error", "test_teardown_error": "error", "test_flaky": "passed",
    }  # fmt: skip
    assert tests["tests/test_every.py::test_flaky"]["attempts"] == ["failed", "passed"]
    assert tests["tests/test_every.py::test_fails"]["attempts"] == ["failed", "failed"]  # --reruns 1
    assert written["metrics"]["test_every::test_flaky"]["attempt"] == 2  # the rerun's metrics
    assert written["metrics"]["test_every::test_passes[1]"]["nested"] == {"a": [1, 2.5]}


# --- the core's rules, pure ---------------------------------------------------------------------


def _log(record: Record, nodeid: str, *phases: tuple[str, str], xfail: bool = False) -> None:
    for when, outcome in phases:
        record.log_phase(nodeid, when, outcome, 0.5, xfail)


def test_phases_merge_into_an_attempt_and_attempts_into_the_test() -> None:
    record = Record()
    _log(record, "t::pass_then_teardown", ("setup", "passed"), ("call", "passed"), ("teardown", "failed"))
    _log(record, "t::fails", ("setup", "passed"), ("call", "failed"), ("teardown", "failed"))
    _log(record, "t::xfail", ("setup", "passed"), ("call", "skipped"), ("teardown", "passed"), xfail=True)
    _log(record, "t::rerun", ("setup", "passed"), ("call", "rerun"), ("teardown", "passed"))
    _log(record, "t::rerun", ("setup", "passed"), ("call", "passed"), ("teardown", "passed"))
    _log(record, "t::worker_died", ("???", "failed"))
    _log(record, "t::cut_short", ("setup", "passed"), ("call", "passed"))  # no teardown: Ctrl-C
    record.cut_short()
    found = {nodeid: (rec.outcome, rec.attempts, rec.duration) for nodeid, rec in record.tests.items()}
    assert found == {
        "t::pass_then_teardown": ("error", ["error"], 1.5),
        "t::fails": ("failed", ["failed"], 1.5),
        "t::xfail": ("xfailed", ["xfailed"], 1.5),
        "t::rerun": ("passed", ["failed", "passed"], 1.5),
        "t::worker_died": ("failed", ["failed"], 0.5),
        "t::cut_short": ("error", ["error"], 1.0),
    }


def test_a_continuation_round_carries_in_the_earlier_rounds_and_their_crash() -> None:
    earlier = Record()
    journal = Journal(session={"start": "2026-12-04 10:00:00", "results_dir": None, "root": "."})
    journal.finished["t::a"] = {"test": "t::a", "record": {"key": "t::a", "outcome": "passed", "attempts": ["passed"]},
                                "metrics": {"m": 1}, "memory": ["rss", []]}  # fmt: skip
    earlier.add_journal(journal)
    earlier.add_crash(Breadcrumb("t::b", "t::b", 1, started=10.0), "killed by SIGSEGV", "stack", ended=12.0)
    assert earlier.to_rerun(reruns=1) == ["t::b"] and earlier.failed()

    handed_on = Record.from_document(json.loads(json.dumps(earlier.carried_document())))  # the file between rounds
    session = Record()
    session.begin(None, runs_tests=True, shard=None)
    session.carry_in(handed_on)
    assert session.start_time() == "2026-12-04 10:00:00"  # the run's start: the first round's
    assert session.metrics == {"t::a": {"m": 1}} and session.memory_source == "rss"
    assert session.reruns_left("t::b", 2) == 1 and session.carried_failed()
    _log(session, "t::b", ("setup", "passed"), ("call", "passed"), ("teardown", "passed"))  # its rerun passes
    entry: dict[str, Any] | None = session.journal_entry("t::b")
    assert entry is not None and entry["record"]["attempts"] == ["failed", "passed"]
    assert entry["record"]["crash"]["cause"] == "killed by SIGSEGV" and not session.carried_failed()
