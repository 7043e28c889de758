"""run_unit's supervisor: it runs pytest, outlives it, and keeps the record true whatever a
test does to its process.

- A test that kills pytest (a segfault or abort in C code, `os._exit`, the OOM killer): the
  supervisor names the test (its breadcrumb), records it failed with the cause and the
  stacks faulthandler wrote, and starts pytest again on the tests not yet run (same
  arguments; only those node ids), handing on what was recorded: the last round writes ONE
  record of every selected test, and the run exits 1.
- A test stuck past its watchdog's deadline, which the watchdog could not end (a C call that
  holds the GIL, signals blocked): the supervisor dumps its process's stacks (py-spy, native
  frames included; else faulthandler's dump on SIGUSR2), kills it, and records the test as
  timed out with the dump. Serially the run goes on as above; under -n the process is an xdist
  worker, and xdist goes on with a fresh one.
- A pytest whose session ended but whose process does not (a thread left running, an atexit
  handler that waits): past a deadline its stacks are shown and it is ended; the run's result
  stands as its record says.
- Its exit code is checked against what the session recorded and how far the journal got: a
  pytest that exits 0 without having run its session, or after a session that failed, never
  makes the run pass; one that died outside any test (a conftest's import, a session-end hook)
  ends the run with 3 and says where.
- pytest dies with the supervisor (Linux's parent-death signal), and after each round every
  process the round started that is still alive is ended and named: on Linux the supervisor is
  a child subreaper, so whatever a test's process did (a double fork, setsid, a scrubbed
  environment) it is among the supervisor's descendants; elsewhere it is found by the round's
  marker in its environment or as part of the Ray cluster it started (testharness.process_sweep).
Files between the plugin and the supervisor: testharness.crash_record; the pytest process
itself (its start, signals, the deadlines, the sweep): testharness.pytest_round; the exit codes
and what the run's end means (`judge`, once per run, which the record then states):
testharness.exit_codes.
"""

from __future__ import annotations

import itertools
import json
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from testharness import crash_record, process_sweep, record_files, results
from testharness.crash_record import CARRIED_ENV, ONLY_ENV, SUMMARY_FILE_ENV, SUPERVISE_DIR_ENV, SUPERVISOR_PID_ENV
from testharness.exit_codes import INTERNAL_ERROR, INTERRUPTED, TESTS_FAILED, USAGE_ERROR, verdict, worse
from testharness.pytest_round import Round, run_forwarding_signals, say, sweep_round
from testharness.record import Record

# Arguments after which a failure ends the run: a crash is one, so nothing goes on after it.
STOP_AT_FAILURE = ("-x", "--exitfirst", "--sw", "--stepwise", "--maxfail=1")


@dataclass
class Outcome:
    """How the run as a whole ended, for `judge`."""

    code: int
    stopped_by: str | None
    summary: dict[str, Any] | None


def read_summary(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def supervise(cmd: list[str], env: dict[str, str], tmp: Path) -> Outcome:
    """Run pytest (`cmd`) until every selected test has an outcome: again on the tests not yet
    run each time a test kills its process (first the crashed ones --rerun-failures may run again)."""
    process_sweep.become_subreaper()  # orphans of the run come back to us: sweep_round ends them
    carried = Record()  # what the rounds recorded: the record a dead pytest could not write
    only: list[str] | None = None
    stop_at_failure = any(a in STOP_AT_FAILURE for a in cmd)
    reruns = reruns_of(cmd)
    for n in itertools.count(1):
        rnd = Round(tmp / f"round{n}")
        rnd.directory.mkdir(parents=True)
        renv = {**env, SUPERVISE_DIR_ENV: str(rnd.directory), SUMMARY_FILE_ENV: str(rnd.directory / "summary.json"),
                SUPERVISOR_PID_ENV: str(os.getpid())}  # fmt: skip
        if only is not None:
            (tmp / "only.json").write_text(json.dumps(only), encoding="utf-8")
            renv[ONLY_ENV] = str(tmp / "only.json")
        if carried.tests:
            (tmp / "carried.json").write_text(json.dumps(carried.carried_document()), encoding="utf-8")
            renv[CARRIED_ENV] = str(tmp / "carried.json")
        code, stopped_by = run_forwarding_signals(cmd, renv, on_start=rnd.started, on_tick=rnd.enforce)
        summary = read_summary(rnd.directory / "summary.json")
        journal = crash_record.read_journal(rnd.directory)
        crashed = summary is None and stopped_by is None and bool(journal.session)
        if crashed:
            carried.add_journal(journal)
            dead = _blame(rnd, journal, code, carried)
        sweep_round(rnd)  # before the next round, after the crash is named
        if summary is not None and summary.get("before_collection"):  # a conftest.py did not import
            return Outcome(code, stopped_by, summary)
        if summary is not None:  # pytest ended its session
            outcome = _session_ended(code, stopped_by, summary, journal, carried, rnd)
            rerun = _crashed_workers_to_rerun(outcome, reruns) if stopped_by is None else None
            if rerun is None:
                return outcome
            carried, only = rerun
            say(f"run_unit: running {len(only)} test(s) that crashed their xdist worker again "
                f"(--rerun-failures {reruns}) in a fresh pytest")  # fmt: skip
            continue
        if stopped_by is not None:
            return Outcome(code, stopped_by, None)
        if not crashed:
            return _no_session(code, journal, rnd)
        if journal.selected is None:
            return _died("before its tests were collected", code, rnd)
        remaining = [nodeid for nodeid in journal.selected if nodeid not in carried.tests]
        if journal.fresh_process is not None:
            nodeid, cause = journal.fresh_process
            say(f"run_unit: {nodeid} left the test process's CUDA context unusable ({cause}); "
                "the tests after it run in a fresh process")  # fmt: skip
        if not dead and not remaining and journal.fresh_process is None:
            # Every selected test has its outcome: pytest died in its session's end.
            where = "in its session's end (a pytest_sessionfinish hook)" if journal.ending else "after its last test"
            outcome = _died(f"{where}, after all {len(journal.selected)} selected tests finished", code, rnd)
            return write_record(
                carried, INTERNAL_ERROR, {**(outcome.summary or {}), "exit_status": int(carried.failed())}
            )
        if remaining and not dead and not journal.finished:
            cause = crash_record.exit_cause(code)
            say(f"run_unit: pytest died outside any test ({cause}); {len(remaining)} test(s) not run")
            for nodeid in remaining:  # no progress to build on: they stay in the record, not run
                carried.add_not_run(nodeid, cause)
            return write_record(carried, INTERNAL_ERROR, None)
        again = [n for n in carried.to_rerun(reruns) if n in dead]
        if (not remaining and not again) or stop_at_failure:
            return write_record(carried, TESTS_FAILED, None)
        if again:
            say(f"run_unit: running {len(again)} crashed test(s) again (--rerun-failures {reruns}) in a fresh pytest")
        if remaining:
            say(f"run_unit: going on with the {len(remaining)} test(s) not run yet")
        only = [*again, *remaining]
    raise AssertionError("itertools.count never ends")


def _crashed_workers_to_rerun(outcome: Outcome, reruns: int) -> tuple[Record, list[str]] | None:
    """Under -n a crash ends an xdist worker, not the session: the tests that crashed theirs and
    may run again (--rerun-failures) do so in a fresh round, which writes the run's one record
    (this round's files are removed: ONE record per run)."""
    latest, dated = _written(outcome)
    if not reruns or outcome.code not in (0, 1) or dated is None:
        return None
    try:
        text, files = record_files.own_files(latest, dated)
        carried = Record.from_document(json.loads(text))
    except (OSError, ValueError):
        return None
    again = carried.to_rerun(reruns)
    if not again:
        return None
    record_files.discard(files)
    return carried, again


def _written(outcome: Outcome) -> tuple[Path | None, Path | None]:
    """Where the session wrote the record: the latest `unit_results.json` (shared by every run
    of the checkout) and this run's own dated copy."""
    summary = outcome.summary or {}
    latest, dated = summary.get("results"), summary.get("results_copy")
    return (Path(latest) if isinstance(latest, str) else None), (Path(dated) if isinstance(dated, str) else None)


def reruns_of(cmd: Sequence[str]) -> int:
    """The --reruns N that pytest-rerunfailures gets (run_unit's --rerun-failures N), else 0."""
    for arg, following in itertools.pairwise([*cmd, ""]):
        value = arg.partition("=")[2] if arg.startswith("--reruns=") else following if arg == "--reruns" else ""
        if value.isdigit():
            return int(value)
    return 0


def _how(code: int) -> str:
    """How a process ended outside any test, from its exit code."""
    if code < 0:
        return crash_record.exit_cause(code)
    return f"it exited with code {code}"


def _died(where: str, code: int, rnd: Round) -> Outcome:
    """pytest died outside any test: one line says where and how, with the stack faulthandler
    wrote (the crashed thread); the run ends with 3."""
    stack = crash_record.read_fault(rnd.directory, rnd.main_pid)
    fatal = crash_record.fault_cause(stack)
    line = f"pytest died {where} ({_how(code)}{': ' + fatal if fatal else ''})"
    if stack and fatal:
        say("\n".join("    " + text for text in crash_record.crashed_thread(stack)))
    return Outcome(INTERNAL_ERROR, None, {"died": line})


def _no_session(code: int, journal: crash_record.Journal, rnd: Round) -> Outcome:
    """pytest ended before a session started: its own answer (--version, --markers, a refused
    argument), or a death while plugins and conftest.py files were loaded (os._exit, a crash)."""
    if journal.returned is not None:
        return Outcome(worse(code, journal.returned), None, None)
    if code == USAGE_ERROR:  # pytest refused its arguments or configuration before its main ran
        return Outcome(code, None, None)
    return _died("before its tests were collected, while loading its plugins and conftest.py files", code, rnd)


def reconcile(code: int, returned: int | None, session_status: int, ended_late: bool) -> tuple[int, str | None]:
    """(the exit code the run stands on, why pytest's own is not it) once pytest's session
    ended: what its main returned (None: it died before), what its session recorded, and
    whether the supervisor ended it for outliving its session (its record stands)."""
    if ended_late:
        return session_status, None
    if returned is None:
        return INTERNAL_ERROR, f"pytest died after its session ended ({_how(code)})"
    if code == returned:
        return code, None
    if worse(code, returned) == returned:  # e.g. os._exit(0) in an atexit handler
        return returned, (f"pytest's process exited with {code} after its session ended with {returned} "
                          f"(an atexit handler or os._exit): the session's status stands")  # fmt: skip
    return (
        INTERNAL_ERROR,
        f"pytest's process ended after its session ({_how(code)}) although its session ended with {returned}",
    )


def _session_ended(
    code: int, stopped_by: str | None, summary: dict[str, Any], journal: crash_record.Journal, carried: Record,
    rnd: Round,
) -> Outcome:  # fmt: skip
    """The round's pytest ended its session: the run's status is the worse of its exit code,
    what its session recorded, and what the journal saw (`judge` then has the record state it)."""
    recorded = summary.get("exit_status")
    session_status = recorded if isinstance(recorded, int) and not isinstance(recorded, bool) else code
    if journal.usage_error is not None:
        summary = {**summary, "usage_error": journal.usage_error}
    if stopped_by is not None and summary.get("stopped") is not None:
        return Outcome(code, stopped_by, summary)  # stopped as asked: "interrupted"
    status, why = reconcile(code, journal.returned, session_status, rnd.ended_late)
    missing = journal.unrecorded(carried.tests) if status == 0 and journal.session.get("runs_tests", True) else []
    if missing and summary.get("stopped") is not None:  # pytest.exit(returncode=0) in a test: stopped early
        status, why = INTERRUPTED, None
    elif missing:
        status = INTERNAL_ERROR
        why = f"{len(missing)} selected test(s) have no outcome, e.g. {missing[0]} (pytest ended without running them)"
    if why is not None:
        if status == INTERNAL_ERROR:
            summary = {**summary, "died": why}
        else:
            say(f"run_unit: {why}")
    return Outcome(status, stopped_by, summary)


def judge(outcome: Outcome) -> tuple[int, str]:
    """The run's verdict, decided once (exit_codes.verdict): (run_unit's exit code, its closing
    line). The record pytest (or the supervisor) wrote states that exit code: where it says
    another, its `exit_status` is corrected, through the files' one writer."""
    status, line = verdict(outcome.code, outcome.summary, outcome.stopped_by)
    latest, dated = _written(outcome)
    try:
        if dated is not None:
            record_files.amend_written(latest, dated, status)
    except (OSError, ValueError, TypeError) as exc:  # ResultsWriteError is an OSError
        say(f"run_unit: could not set exit_status {status} in {dated}: {exc}")
    return status, line


def _blame(rnd: Round, journal: crash_record.Journal, code: int, carried: Record) -> list[str]:
    """Record the tests the dead processes were in, with why they died; returns their ids."""
    ended = time.time()
    dead = []
    for crumb in crash_record.read_breadcrumbs(rnd.directory):
        if crumb.nodeid in journal.finished:  # (this round's crumbs only: its own directory)
            continue  # a worker crash xdist reported, or a process that ended between tests
        verdict = rnd.killed.get(crumb.pid)
        stack = verdict["stack"] if verdict is not None else crash_record.read_fault(rnd.directory, crumb.pid)
        if verdict is not None:
            cause = verdict["cause"]
        elif crumb.pid == rnd.main_pid:
            fatal = crash_record.fault_cause(stack)
            cause = crash_record.exit_cause(code) + (f": {fatal}" if fatal else "")
        else:
            cause = f"pytest died ({crash_record.exit_cause(code)}) while its xdist worker ran it"
        cause += crash_record.where_it_died(crumb)
        carried.add_crash(crumb, cause, stack, ended)
        dead.append(crumb.nodeid)
        say(f"run_unit: CRASHED: {crumb.nodeid}: {cause}")
        if stack:
            say("\n".join("    " + line for line in crash_record.crashed_thread(stack)))
    return dead


def write_record(carried: Record, status: int, summary: dict[str, Any] | None) -> Outcome:
    """No pytest is left to write the record: it is closed here, by the same `Record.close` a
    session ends with, with the status the run ends with (1: a test crashed; 3: pytest died
    outside any test)."""
    if carried.results_dir is None:
        return Outcome(status, None, summary)  # the run writes no record (not on the test roots, no config)
    carried.close(status, results.DIED_COVERAGE)
    if carried.write_error:
        return Outcome(
            INTERNAL_ERROR, None, {**(summary or {}), "results_error": carried.write_error, "tests_exit_status": status}
        )
    written = {"results": str(carried.paths[0]), "results_copy": str(carried.paths[1])}
    return Outcome(status, None, {"exit_status": status, **(summary or {}), **written})
