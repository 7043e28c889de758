"""The run record: what unit_results.json says of one run, in the making and written (pure: no
pytest, no Ray).

A `Record` is the state; nothing but its methods changes it, whoever records:
- the recorder (testharness.recorder) logs each phase of each test (`log_phase`: the phases of
  an attempt merge into its outcome, a rerun adds an attempt) with what other plugins hung on
  the report (`note_extras`, `take_metrics`, `merge_memory`), and closes the record as the
  session ends (`close`, `amend_exit_status`);
- the `tracker` fixture (testharness.tracker) stores a test's metrics and memory readings;
- testharness.supervised journals each finished test (`journal_entry`) and, in a continuation
  round, takes in what the earlier rounds recorded (`carry_in`);
- run_unit's supervisor keeps one Record across its rounds: it rebuilds what a dead pytest
  recorded from its journal (`add_journal`), adds the tests that died (`add_crash`,
  `add_not_run`), hands it to the next round (`carried`), and where no pytest is left to write
  it, closes it with the same `close` a normal session ends with.

`close` builds the document (results.py: the schema) and has it written by the files' one
writer, testharness.record_files.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from testharness import metrics as metric_keys
from testharness.crash_record import Breadcrumb, Journal, clip
from testharness.exit_codes import INTERNAL_ERROR  # the exit status of a run whose record could not be written
from testharness.record_files import discard, remove_previous, rewrite_results, write_results
from testharness.results import (
    RESULTS_NAME,
    START_TIME_FORMAT,
    OutcomeRecord,
    ResultsWriteError,
    build_results,
    git_commit,
    more_telling,
    with_teardown_error,
)

PHASES = ("setup", "call", "teardown")
FAILED = ("failed", "error")


# --- how phases and attempts merge -----------------------------------------------------------


def phase_outcome(when: str, outcome: str, xfail: bool) -> str:
    """The outcome of one phase report (pytest's `when`, `outcome`, whether it has `wasxfail`),
    in the results file's words."""
    if when not in PHASES:  # xdist: "worker 'gw0' crashed while running" it (when="???")
        return "failed"  # as the terminal says, rerun (pytest-rerunfailures) or not
    if outcome == "rerun":  # pytest-rerunfailures: this attempt failed, another follows
        return "failed" if when == "call" else "error"
    if when == "call":
        if outcome == "passed":
            return "xpassed" if xfail else "passed"
        if outcome == "skipped":
            return "xfailed" if xfail else "skipped"
        return "failed"
    if outcome == "failed":
        return "error"
    return "skipped" if outcome == "skipped" else "passed"


def merge_phase(before: str, phase: str, when: str) -> str:
    """An attempt's outcome so far (`before`) once its phase `when` ended with `phase`."""
    if when == "teardown":
        return with_teardown_error(before) if phase == "error" else before
    return phase


# --- the record ---------------------------------------------------------------------------------


@dataclass
class Record:
    """One run's record in the making: change it only through its methods."""

    root: Path = Path(".")  # the project: its git commit is the record's
    test_roots: tuple[Path, ...] = ()
    results_dir: Path | None = None  # where the files go; None: this run writes none
    runs_tests: bool = True  # False for --collect-only, --shard-plan: no record
    shard: str | None = None  # "I/N" of a --shard run
    start: datetime | None = None  # the session's (a supervised run's: its first round's)
    metrics: dict[str, dict[str, Any]] = field(default_factory=dict)  # metric key -> metrics
    tests: dict[str, OutcomeRecord] = field(default_factory=dict)
    pending: dict[str, tuple[str, float]] = field(default_factory=dict)  # attempt in progress
    extras: dict[str, dict[str, Any]] = field(default_factory=dict)  # its leaks, hang, crash
    gpu_names: set[str] = field(default_factory=set)
    memory_source: str = "none"
    carried: frozenset[str] = frozenset()  # the tests earlier rounds recorded
    deselected: int = 0
    skipped_files: dict[str, str] = field(default_factory=dict)  # skipped at module level: why
    stopped: dict[str, str] | None = None  # what interrupted the session, for run_unit's last line
    path_keyed: frozenset[str] | None = None  # test files whose keys carry their path (set at collection)
    added: dict[str, float] = field(default_factory=dict)  # when git added each of those files
    document: dict[str, Any] | None = None  # what was written, and where
    paths: tuple[Path, ...] = ()
    kept_previous: str | None = None  # the previous run's unit_results.json, when it could not be removed
    tests_status: int | None = None  # the exit status before a failed write made it INTERNAL_ERROR
    write_error: str = ""  # why the record was not written (one line), "" when it was or none was due
    # The process whose session this is: a child a test forks inherits this state, and must
    # never write (nor remove) the record.
    pid: int = field(default_factory=os.getpid)
    # Held while a metric is stored and while the metrics are copied: a thread a test left
    # running may still call `track` as the session ends.
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    # --- the session ---

    def begin(self, results_dir: Path | None, runs_tests: bool, shard: str | None) -> None:
        self.start = datetime.now()
        self.runs_tests = runs_tests
        self.results_dir = results_dir if runs_tests else None
        self.shard = shard

    def owned_here(self) -> bool:
        return os.getpid() == self.pid

    def clear_previous(self) -> None:
        """Remove the previous run's record as this one starts: if this run's cannot be written
        (or the run is killed), no earlier file stays behind looking like this run's."""
        if self.results_dir is not None and remove_previous(self.results_dir) is not None:
            self.kept_previous = str(self.results_dir / RESULTS_NAME)

    def start_time(self) -> str:
        return (self.start or datetime.now()).strftime(START_TIME_FORMAT)

    def key(self, nodeid: str) -> str:
        return metric_keys.metric_key(nodeid, self.path_keyed or frozenset())

    def learn_test_files(
        self, rootdir: Path, collected: Iterable[str], patterns: Iterable[str]
    ) -> dict[str, list[str]]:
        """Decide, once per session, which test files' keys carry their path; returns the
        shared names (metrics.clashing_test_files)."""
        roots = tuple(r for r in self.test_roots if r.is_dir())
        clashes = metric_keys.clashing_test_files(rootdir, collected, roots, patterns)
        if self.path_keyed is None:
            self.added = metric_keys.git_added_times(rootdir, [p for paths in clashes.values() for p in paths])
            self.path_keyed = metric_keys.path_keyed_files(clashes, self.added)
        return clashes

    def note_deselected(self, count: int) -> None:
        self.deselected += count

    def note_stop(self, cause: dict[str, str]) -> None:
        self.stopped = cause

    # --- metrics and memory ---

    def open_metrics(self, key: str) -> None:
        """A test's tracker starts: a rerun replaces the earlier attempt's metrics."""
        with self.lock:
            self.metrics[key] = {}

    def put_metric(self, key: str, name: str, value: Any) -> None:
        with self.lock:
            self.metrics.setdefault(key, {})[name] = value

    def metrics_of(self, key: str) -> dict[str, Any] | None:
        with self.lock:  # a copy: a thread the test left running may still be tracking
            found = self.metrics.get(key)
            return dict(found) if found is not None else None

    def take_metrics(self, key: str, found: dict[str, Any]) -> None:
        """A test's metrics from the process that ran it (an xdist worker). A copy: in that
        process the report still carries them to the controller while its threads may track on."""
        with self.lock:
            self.metrics[key] = dict(found)

    def read_memory(self, source: str, names: Iterable[str]) -> None:
        """A reading in this process: the latest says where the figures come from."""
        self.memory_source = source
        self.gpu_names.update(names)

    def merge_memory(self, source: str, names: Iterable[str]) -> None:
        """Readings of another process (a worker, an earlier round): the most telling source stays."""
        self.memory_source = more_telling(self.memory_source, source)
        self.gpu_names.update(n for n in names if isinstance(n, str))

    def memory(self) -> list[Any]:
        return [self.memory_source, sorted(self.gpu_names)]

    # --- outcomes ---

    def note_extras(self, nodeid: str, leaks: Any = None, hang: Any = None, crash: Any = None) -> None:
        """What hygiene (leaks, hang) and supervised (crash) found in the attempt in progress."""
        extra = self.extras.setdefault(nodeid, {})
        if leaks:
            extra["leaks"] = [*extra.get("leaks", []), *leaks]
        if hang:
            extra["hang"] = hang
        if crash:
            extra["crash"] = crash

    def log_phase(self, nodeid: str, when: str, outcome: str, duration: float, xfail: bool = False) -> None:
        """One phase report of a test; its teardown (or its worker's crash) ends the attempt."""
        phase = phase_outcome(when, outcome, xfail)
        if when == "setup" or nodeid not in self.pending:
            self.pending[nodeid] = (phase, duration)
        else:
            before, so_far = self.pending[nodeid]
            self.pending[nodeid] = (merge_phase(before, phase, when), so_far + duration)
        if when == "teardown" or when not in PHASES:  # every attempt, rerun or not, ends so
            self._finish_attempt(nodeid)

    def _finish_attempt(self, nodeid: str) -> None:
        outcome, duration = self.pending.pop(nodeid)
        rec = self.tests.setdefault(nodeid, OutcomeRecord(key=self.key(nodeid)))
        rec.outcome, rec.duration = outcome, duration
        rec.attempts.append(outcome)
        extra = self.extras.pop(nodeid, {})
        rec.leaks.extend(extra.get("leaks", []))
        if extra.get("hang") is not None:
            rec.hang = extra["hang"]
        if extra.get("crash") is not None:
            rec.crash = extra["crash"]

    def add_error(self, nodeid: str, line: str) -> None:
        """A file that could not be collected (or a conftest.py imported): an `error` entry."""
        self.tests[nodeid] = OutcomeRecord(key=self.key(nodeid), outcome="error", attempts=["error"], error=line)

    def cut_short(self) -> None:
        """The attempts in progress (Ctrl-C, a crash) end without their teardown: a pass so far is an error."""
        for nodeid, (outcome, duration) in list(self.pending.items()):
            self.pending[nodeid] = ("error" if outcome == "passed" else outcome, duration)
            self._finish_attempt(nodeid)

    def outcome_so_far(self, nodeid: str) -> str:
        """The attempt in progress's outcome (a test whose own fixtures are torn down)."""
        pending = self.pending.get(nodeid)
        return pending[0] if pending is not None else "passed"

    def failed(self) -> bool:
        return any(rec.outcome in FAILED for rec in self.tests.values())

    def carried_failed(self) -> bool:
        """A test an earlier round recorded (its process died) failed this run, unless a rerun passed."""
        return any(self.tests[n].outcome in FAILED for n in self.carried if n in self.tests)

    # --- between the rounds of a supervised run (journal: crash_record) ---

    def session_entry(self) -> dict[str, Any]:
        """The journal's session line: where the record goes and when the session started."""
        return {"results_dir": str(self.results_dir) if self.results_dir is not None else None,
                "start": self.start_time(), "shard": self.shard, "root": str(self.root),
                "runs_tests": self.runs_tests}  # fmt: skip

    def journal_entry(self, nodeid: str) -> dict[str, Any] | None:
        """A finished test's journal line: its entry, metrics and the memory readings so far."""
        rec = self.tests.get(nodeid)
        if rec is None or nodeid in self.pending:
            return None
        return {"test": nodeid, "record": rec.as_json(), "metrics": self.metrics_of(rec.key), "memory": self.memory()}

    def add_journal(self, journal: Journal) -> None:
        """What a pytest journaled before it died (its session line names where its record goes)."""
        session = journal.session
        if self.start is None and isinstance(session.get("start"), str):
            self.start = datetime.strptime(session["start"], START_TIME_FORMAT)
        target, shard = session.get("results_dir"), session.get("shard")
        self.results_dir = Path(target) if isinstance(target, str) else None
        self.root = Path(str(session.get("root", ".")))
        self.shard = shard if isinstance(shard, str) else None
        for nodeid, line in journal.finished.items():
            rec = OutcomeRecord.from_json(line["record"])
            self.tests[nodeid] = rec
            if isinstance(line.get("metrics"), dict):
                self.take_metrics(rec.key, line["metrics"])
            memory = line.get("memory")
            if isinstance(memory, list) and len(memory) == 2 and isinstance(memory[1], list):
                self.merge_memory(str(memory[0]), memory[1])

    def add_crash(self, crumb: Breadcrumb, cause: str, stack: str, ended: float) -> None:
        """A test whose process died in it (another attempt, when --rerun-failures ran it again).
        A death while only the fixtures around it were left to tear down is an error at its
        teardown, as pytest reports a failing module or session fixture teardown."""
        outcome = "failed" if crumb.around is None else with_teardown_error(crumb.around)
        earlier = self.tests[crumb.nodeid].attempts if crumb.nodeid in self.tests else []
        duration, crash = round(max(0.0, ended - crumb.started), 6), {"cause": cause, "stack": clip(stack)}
        self.tests[crumb.nodeid] = OutcomeRecord(crumb.key, outcome, duration, [*earlier, outcome], crash=crash)

    def add_not_run(self, nodeid: str, cause: str) -> None:
        """A selected test that never ran: pytest died outside any test before it."""
        crash = {"cause": f"not run: pytest died before it ({cause})", "stack": ""}
        self.tests[nodeid] = OutcomeRecord(metric_keys.metric_key(nodeid), "error", 0.0, ["error"], crash=crash)

    def to_rerun(self, reruns: int) -> list[str]:
        """The tests that crashed their process (not merely failed: pytest-rerunfailures reran
        those) with reruns left of `reruns`."""
        return [
            n for n, rec in self.tests.items() if rec.crash and rec.outcome == "failed" and len(rec.attempts) <= reruns
        ]

    def reruns_left(self, nodeid: str, reruns: int) -> int | None:
        """The reruns an earlier round's test has left of `reruns` (None: not one of them)."""
        rec = self.tests.get(nodeid)
        return None if rec is None else max(0, reruns - len(rec.attempts))

    def carried_document(self) -> dict[str, Any]:
        """What the next round takes in (TESTHARNESS_CARRIED): the results document's fields of it."""
        return {"start_time": self.start_time() if self.start else "", "tests": {n: rec.as_json() for n, rec in self.tests.items()},
                "metrics": self.metrics, "memory_source": self.memory_source,
                "gpu_types": sorted(self.gpu_names)}  # fmt: skip

    @classmethod
    def from_document(cls, document: Mapping[str, Any]) -> Record:
        """What a results document (or a `carried_document`) recorded, to carry into another round."""
        rec = cls()
        start, tests, found = document.get("start_time"), document.get("tests"), document.get("metrics")
        if isinstance(start, str) and start:
            rec.start = datetime.strptime(start, START_TIME_FORMAT)
        if isinstance(tests, dict):
            rec.tests = {k: OutcomeRecord.from_json(v) for k, v in tests.items() if isinstance(v, dict)}
        if isinstance(found, dict):
            rec.metrics = {k: dict(v) for k, v in found.items() if isinstance(v, dict)}
        names, source = document.get("gpu_types"), document.get("memory_source")
        rec.merge_memory(source if isinstance(source, str) else "none", names if isinstance(names, list) else [])
        return rec

    @classmethod
    def read_carried(cls, path: Path) -> Record:
        return cls.from_document(json.loads(path.read_text(encoding="utf-8")))

    def carry_in(self, earlier: Record) -> None:
        """Take what the earlier rounds of a supervised run recorded: this session's record then
        lists every test of the run, from the first round's start."""
        if earlier.start is not None:
            self.start = earlier.start
        for nodeid, rec in earlier.tests.items():
            self.tests[nodeid] = OutcomeRecord.from_json(rec.as_json())
        self.carried = frozenset(earlier.tests)
        with self.lock:
            self.metrics.update({key: dict(values) for key, values in earlier.metrics.items()})
        self.merge_memory(earlier.memory_source, earlier.gpu_names)

    # --- the closing: the document, the files, the exit status ---

    def close(self, exit_status: int, coverage: float | str, gpu_types: Iterable[str] = ()) -> int:
        """End the record: attempts cut short are errors, the document is built and written
        (when this run writes one). Returns the exit status the run ends with: INTERNAL_ERROR
        when the files could not be written (`write_error` says why)."""
        self.cut_short()
        if self.results_dir is None:
            return exit_status
        start = self.start or datetime.now()
        try:
            with self.lock:  # a copy: a thread the test left running may still be tracking
                found = {key: dict(values) for key, values in self.metrics.items()}
            self.document = build_results(
                exit_status=exit_status, git_commit=git_commit(self.root), start=start, metrics=found,
                gpu_types=sorted(self.gpu_names.union(gpu_types)), coverage=coverage,
                memory_source=self.memory_source, tests=self.tests, shard=self.shard,
            )  # fmt: skip
            self.paths = write_results(self.results_dir, self.document, start)
        except Exception as exc:  # noqa: BLE001  ResultsWriteError is one line already; else its type too
            return self.fail_write(
                str(exc) if isinstance(exc, ResultsWriteError) else f"{type(exc).__name__}: {exc}", exit_status
            )
        return exit_status

    def amend_exit_status(self, status: int) -> int | None:
        """A plugin changed the exit status after the files were written: they follow it (or,
        when they cannot be rewritten, are removed). Returns the run's status, None: no change."""
        if not self.paths or self.document is None or self.document["exit_status"] == status:
            return None
        self.document["exit_status"] = status
        try:
            rewrite_results(self.paths, self.document)
        except ResultsWriteError as exc:
            return self.fail_write(str(exc), status)
        return status

    def fail_write(self, reason: str, status: int) -> int:
        """The record could not be written: the run exits INTERNAL_ERROR with one line, and
        keeps no file of it (one would state an exit status the run does not end with)."""
        if self.tests_status is None:
            self.tests_status = status
        kept = f"; {self.kept_previous} is an earlier run's record, not this one's" if self.kept_previous else ""
        self.write_error = reason + kept
        discard(self.paths)
        self.paths = ()
        return INTERNAL_ERROR

    def written_to(self) -> str:
        return f"unit results: {self.paths[0]} (copy: {self.paths[1]})" if self.paths else ""

    def error_line(self) -> str:
        return f"testharness: the unit results were not written: {self.write_error} (exit status {INTERNAL_ERROR})"
