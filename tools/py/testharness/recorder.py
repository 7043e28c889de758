"""pytest adapter: the results recorder: per-test outcomes and unit_results.json (the `tracker`
fixture, which records metrics into it, is testharness.tracker's).

Hooks only translate pytest events into calls on results.py / gpu.py. All state lives in a
per-config object (pytester inner runs in the same process get their own).

Where results go: `--unit-results-dir DIR`, else $TESTHARNESS_RESULTS_DIR, else
`[tool.testharness] results_dir` (default: the first test root) under the pytest rootdir.
Without an explicit dir they are written only when the run concerns a configured test root
(`test_roots`, default pytest's testpaths), so a pytest run on an unrelated directory writes nothing;
nor does a project without `[tool.testharness]` (the plugin merely installed: the fixture
records in memory, for `session_record`).

Metric keys are `<file stem>::<test>` and never change because another file was added: where
test files share a name, the one git added first keeps the short keys, the others' keys carry
their path, and collection warns, naming the files (metrics.path_keyed_files).
"""

from __future__ import annotations

import os
import sys
import threading
import warnings
from collections.abc import Callable, Generator, Iterable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from testharness import gpu, metrics, real_ray, results, run_summary
from testharness.contract import get_extra, is_xdist_worker, put_extra, settings_of
from testharness.crash_record import supervisor_gone
from testharness.history import RESULTS_DIR_ENV, sent_results_dir
from testharness.settings import Settings, session_in_scope


@dataclass
class RecordState:
    settings: Settings
    results_dir: Path | None = None
    start: datetime = field(default_factory=datetime.now)
    metrics: dict[str, dict[str, Any]] = field(default_factory=dict)
    tests: dict[str, results.OutcomeRecord] = field(default_factory=dict)
    pending: dict[str, tuple[str, float]] = field(default_factory=dict)  # attempt in progress
    hygiene: dict[str, dict[str, Any]] = field(default_factory=dict)  # leaks, hang, crash of the attempt
    gpu_names: set[str] = field(default_factory=set)
    memory_source: str = "none"
    cluster_read: bool = False
    deselected: int = 0
    session: pytest.Session | None = None
    path_keyed: frozenset[str] | None = None  # test files whose keys carry their path (set at collection)
    added: dict[str, float] = field(default_factory=dict)  # when git added each of those files
    document: dict[str, Any] | None = None  # what was written, and where
    paths: tuple[Path, ...] = ()
    written_to: str = ""
    # The process whose session this is: a child a test forks inherits this state, and must
    # never write (nor remove) the record.
    pid: int = field(default_factory=os.getpid)
    # Held while a metric is stored and while the metrics are copied to be written: a thread
    # a test left running may still call `track` as the session ends.
    lock: threading.Lock = field(default_factory=threading.Lock)
    kept_previous: str | None = None  # the previous run's unit_results.json, when it could not be removed
    tests_status: int | None = None  # the exit status before a failed write made it INTERNAL_ERROR
    write_error: str = ""  # why the record was not written (one line), "" when it was or none was due
    error_shown: bool = False
    stopped: dict[str, str] | None = None  # what interrupted the session, for run_unit's last line

    def key(self, nodeid: str) -> str:
        return metrics.metric_key(nodeid, self.path_keyed or frozenset())

    def learn_test_files(
        self, rootdir: Path, collected: Iterable[str], patterns: Iterable[str]
    ) -> dict[str, list[str]]:
        """Decide, once per session, which test files' keys carry their path; returns the
        shared names (metrics.clashing_test_files)."""
        roots = tuple(r for r in self.settings.test_roots if r.is_dir())
        clashes = metrics.clashing_test_files(rootdir, collected, roots, patterns)
        if self.path_keyed is None:
            self.added = metrics.git_added_times(rootdir, [p for paths in clashes.values() for p in paths])
            self.path_keyed = metrics.path_keyed_files(clashes, self.added)
        return clashes


_STATE = pytest.StashKey[RecordState]()


def is_active(config: pytest.Config) -> bool:
    return _STATE in config.stash


def state_of(config: pytest.Config) -> RecordState:
    """This session's record in the making (the tracker fixture records its metrics there)."""
    return config.stash[_STATE]


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("testharness", "test harness (results, tracker)")
    group.addoption(
        "--unit-results-dir",
        dest="unit_results_dir",
        default=None,
        metavar="DIR",
        help=f"write unit_results.json and unit_results/ here (env {RESULTS_DIR_ENV}; "
        "default: [tool.testharness] results_dir, only for runs on the test roots)",
    )


def pytest_configure(config: pytest.Config) -> None:
    state = RecordState(settings=settings_of(config))
    config.stash[_STATE] = state
    if getattr(config.option, "cov_source", None):  # run with --cov
        # Coverage follows Ray workers only when they run this interpreter and environment;
        # Ray's `uv run` hook would start them from a re-packaged copy, unmeasured.
        os.environ.setdefault("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")
    config.pluginmanager.register(_Recorder(state), f"testharness-recorder-{id(config)}")


def _results_dir(session: pytest.Session, st: RecordState) -> Path | None:
    config = session.config
    sent = sent_results_dir(config.getoption("unit_results_dir"))
    if sent is not None:
        return sent
    if not st.settings.configured:
        return None  # a project that never asked for a results file gets none
    # testpaths are relative to the rootdir; command-line paths to the invocation dir.
    from_testpaths = config.args_source == pytest.Config.ArgsSource.TESTPATHS
    base = config.rootpath if from_testpaths else config.invocation_params.dir
    roots = tuple(r for r in st.settings.test_roots if r.is_dir())
    if session_in_scope(list(config.args), Path(base), roots):
        return st.settings.results_dir
    return None


# --- per-test outcomes -------------------------------------------------------------------


_PHASES = ("setup", "call", "teardown")


def _phase_outcome(report: pytest.TestReport) -> str:
    """Outcome of one phase report, in the results-file vocabulary."""
    xfail = hasattr(report, "wasxfail")
    if report.when not in _PHASES:  # xdist: "worker 'gw0' crashed while running" it (when="???")
        return "failed"  # as the terminal says, rerun (pytest-rerunfailures) or not
    if str(report.outcome) == "rerun":  # pytest-rerunfailures: this attempt failed, another follows
        return "failed" if report.when == "call" else "error"
    if report.when == "call":
        if report.passed:
            return "xpassed" if xfail else "passed"
        if report.skipped:
            return "xfailed" if xfail else "skipped"
        return "failed"
    if report.failed:
        return "error"
    return "skipped" if report.skipped else "passed"


def _merge(before: str, phase: str, when: str) -> str:
    if when == "setup":
        return phase
    if when == "teardown":
        return results.with_teardown_error(before) if phase == "error" else before
    return phase


def _finish_attempt(st: RecordState, nodeid: str) -> None:
    outcome, duration = st.pending.pop(nodeid)
    rec = st.tests.setdefault(nodeid, results.OutcomeRecord(key=st.key(nodeid)))
    rec.outcome, rec.duration = outcome, duration
    rec.attempts.append(outcome)
    extra = st.hygiene.pop(nodeid, {})  # testharness.hygiene: carried on the reports
    rec.leaks.extend(extra.get("leaks", []))
    if extra.get("hang") is not None:
        rec.hang = extra["hang"]
    if extra.get("crash") is not None:
        rec.crash = extra["crash"]


# --- session end -------------------------------------------------------------------------


def coverage_of(config: pytest.Config, st: RecordState) -> float | str:
    plugin = config.pluginmanager.getplugin("_cov")
    total = getattr(plugin, "cov_total", None)
    if isinstance(total, (int, float)):
        return float(total)
    pkg = st.settings.source_packages[0] if st.settings.source_packages else "<your package>"
    if plugin is not None and getattr(plugin, "cov_controller", None) is not None:
        return "not measured: no coverage report (session interrupted, or --cov-report= empty)"
    return f"not measured: run with --cov={pkg}"


def writes_results(config: pytest.Config) -> bool:
    """Runs that execute no test leave no record: they would only dilute the history."""
    return not (config.option.collectonly or config.getoption("shard_plan", False))


def _owns_the_record(session: pytest.Session, st: RecordState) -> bool:
    """Only the session's own process writes: not an xdist worker (the controller sees every
    report, metrics ride on them, and writes once), nor a child a test forked, nor a pytest
    whose run_unit is gone (killed: a later run's files may be there by now)."""
    return not is_xdist_worker(session.config) and os.getpid() == st.pid and not supervisor_gone(os.environ)


def _fail_write(session: pytest.Session, st: RecordState, reason: str) -> None:
    """The record could not be written: the run exits INTERNAL_ERROR (3), with one line, and
    keeps no file of it (one would state an exit status the run does not end with)."""
    if st.tests_status is None:
        st.tests_status = int(session.exitstatus)
    session.exitstatus = pytest.ExitCode.INTERNAL_ERROR
    kept = f"; {st.kept_previous} is an earlier run's record, not this one's" if st.kept_previous else ""
    st.write_error = reason + kept
    results.remove_files(st.paths)
    st.written_to = ""
    st.paths = ()


def _write(session: pytest.Session, st: RecordState) -> None:
    if not _owns_the_record(session, st):
        if supervisor_gone(os.environ):
            print("testharness: run_unit, which started this pytest, is gone: no record written", file=sys.stderr)
        return
    for nodeid in list(st.pending):  # an attempt cut short (Ctrl-C, crash) has no teardown
        outcome, dur = st.pending[nodeid]
        st.pending[nodeid] = ("error" if outcome == "passed" else outcome, dur)
        _finish_attempt(st, nodeid)
    try:
        _write_results(session, st)
    except Exception as exc:  # noqa: BLE001  ResultsWriteError is one line already; anything else: its type too
        reason = str(exc) if isinstance(exc, results.ResultsWriteError) else f"{type(exc).__name__}: {exc}"
        _fail_write(session, st, reason)
    run_summary.write(session, st)


def _write_results(session: pytest.Session, st: RecordState) -> None:
    if st.results_dir is None or not writes_results(session.config):
        return
    names = set(st.gpu_names)
    try:
        names.update(gpu.gpu_types())
    except Exception:  # noqa: BLE001  GPU names are extra: never a lost record for them
        pass
    with st.lock:  # a copy: a thread the test left running may still be tracking
        metrics = {key: dict(values) for key, values in st.metrics.items()}
    st.document = results.build_results(
        exit_status=int(session.exitstatus),
        git_commit=results.git_commit(st.settings.root),
        start=st.start,
        metrics=metrics,
        gpu_types=sorted(names),
        coverage=coverage_of(session.config, st),
        memory_source=st.memory_source,
        tests=st.tests,
        shard=session.config.getoption("shard", None),
    )
    st.paths = results.write_results(st.results_dir, st.document, st.start)
    st.written_to = f"unit results: {st.paths[0]} (copy: {st.paths[1]})"


def _amend_exit_status(session: pytest.Session, st: RecordState) -> None:
    """A plugin may still change the exit status after the files were written: follow it
    (or, when the files cannot be rewritten, remove them and fail the run)."""
    status = int(session.exitstatus)
    if not st.paths or st.document is None or st.document["exit_status"] == status:
        return
    st.document["exit_status"] = status
    try:
        results.rewrite_results(st.paths, st.document)
    except results.ResultsWriteError as exc:
        _fail_write(session, st, str(exc))
    run_summary.write(session, st)


def _guarded(step: Callable[[pytest.Session, RecordState], None], session: pytest.Session, st: RecordState) -> None:
    """Run a session-end step; an unexpected error in it is a failed write (one line, exit 3),
    never a traceback that pytest would turn into an internal error of its own."""
    try:
        step(session, st)
    except Exception as exc:  # noqa: BLE001  a failed write is one line and exit 3, never an internal error
        _fail_write(session, st, f"{type(exc).__name__}: {exc}")
        run_summary.write(session, st)


def _error_line(st: RecordState) -> str:
    return f"testharness: the unit results were not written: {st.write_error} (exit status 3)"


def _warn_clash(stem: str, paths: list[str], st: RecordState, rootdir: Path) -> None:
    """One collection warning per shared file name, naming every file and its keys."""
    owner, message = metrics.clash_message(stem, paths, st.path_keyed or frozenset(), st.added)
    file = rootdir / owner if not Path(owner).is_absolute() else Path(owner)
    warnings.warn_explicit(pytest.PytestCollectionWarning(message), pytest.PytestCollectionWarning, str(file), 1)


class _Recorder:
    """Per-session hooks, registered per config so nested pytester sessions stay apart."""

    def __init__(self, state: RecordState) -> None:
        self.st = state

    def pytest_sessionstart(self, session: pytest.Session) -> None:
        self.st.start = datetime.now()
        self.st.session = session
        self.st.results_dir = _results_dir(session, self.st)
        if self.st.results_dir is not None and writes_results(session.config) and _owns_the_record(session, self.st):
            # The previous run's record goes now: if this run's cannot be written (or the run
            # is killed), no earlier file stays behind looking like this run's.
            if results.remove_previous(self.st.results_dir) is not None:
                self.st.kept_previous = str(self.st.results_dir / results.RESULTS_NAME)

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        config = session.config
        collected = {item.nodeid.partition("::")[0] for item in session.items}
        clashes = self.st.learn_test_files(config.rootpath, collected, config.getini("python_files"))
        for stem, paths in clashes.items():
            _warn_clash(stem, paths, self.st, config.rootpath)

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_node_collection_finished(self, node: Any, ids: list[str]) -> None:
        # The xdist controller collects nothing itself: it learns the files from a worker's
        # collection (the same in every worker) to key the metrics the workers send.
        if self.st.path_keyed is None and self.st.session is not None:
            config = self.st.session.config
            collected = {nodeid.partition("::")[0] for nodeid in ids}
            self.st.learn_test_files(config.rootpath, collected, config.getini("python_files"))

    def pytest_deselected(self, items: list[pytest.Item]) -> None:
        self.st.deselected += len(items)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, Any, Any]:
        report = yield
        if call.when == "teardown" and is_xdist_worker(item.config):
            # Carried to the controller with the report (xdist serialises its attributes).
            with self.st.lock:  # a copy: a thread the test left running may still be tracking
                metrics = self.st.metrics.get(self.st.key(item.nodeid))
                put_extra(report, "testharness_metrics", dict(metrics) if metrics is not None else None)
            put_extra(report, "testharness_memory", [self.st.memory_source, sorted(self.st.gpu_names)])
        return report

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        st = self.st
        metrics = get_extra(report, "testharness_metrics")
        if isinstance(metrics, dict):  # from an xdist worker (in the worker: the same dict)
            st.metrics[st.key(report.nodeid)] = metrics
        memory = get_extra(report, "testharness_memory")
        if isinstance(memory, list) and len(memory) == 2:  # what the worker's get_max_mem saw
            source, names = memory
            st.memory_source = results.more_telling(st.memory_source, source)
            st.gpu_names.update(names)
        # leaks, hang: set by testharness.hygiene (xdist carries them); crash: by
        # testharness.supervised on the report of a test that killed its xdist worker
        for name in ("leaks", "hang", "crash"):
            value = get_extra(report, f"testharness_{name}")
            if value:
                extra = st.hygiene.setdefault(report.nodeid, {})
                extra[name] = [*extra.get(name, []), *value] if name == "leaks" else value
        phase = _phase_outcome(report)
        if report.when == "setup" or report.nodeid not in st.pending:
            st.pending[report.nodeid] = (phase, report.duration)
        else:
            before, dur = st.pending[report.nodeid]
            merged = _merge(before, phase, report.when)
            st.pending[report.nodeid] = (merged, dur + report.duration)
        if report.when == "teardown" or report.when not in _PHASES:
            # Every attempt, rerun or not, ends with its teardown, or with its worker's crash.
            _finish_attempt(st, report.nodeid)

    def pytest_keyboard_interrupt(self, excinfo: pytest.ExceptionInfo[BaseException]) -> None:
        self.st.stopped = run_summary.stop_cause(excinfo.value)

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_teardown(self, item: pytest.Item) -> None:
        # Read the cluster's GPU names once while Ray is surely up: the last test's teardown
        # also tears down the session fixture that stops Ray.
        if not self.st.cluster_read and real_ray.connected() is not None:
            self.st.cluster_read = True
            try:
                for node in gpu.cluster_readings():
                    self.st.gpu_names.update(node.gpu_names)
            except Exception:  # noqa: BLE001  GPU names are extra: never a failed teardown for them
                pass

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        # Called by the terminal reporter after every pytest_sessionfinish implementation.
        if self.st.written_to:
            terminalreporter.write_line(self.st.written_to)
        if self.st.write_error:
            terminalreporter.write_line(_error_line(self.st), red=True, bold=True)
            self.st.error_shown = True

    # The innermost wrapper: its code after `yield` runs once every plain implementation
    # (pytest-testmon's and sharding's trylast ones change the exit status) is done, and
    # before the terminal reporter's wrapper prints the summary with our line.
    @pytest.hookimpl(wrapper=True, trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> Generator[None, None, None]:
        try:
            return (yield)
        finally:
            _guarded(_write, session, self.st)  # a record it cannot write fails the run (exit 3), one line

    def pytest_unconfigure(self, config: pytest.Config) -> None:
        # pytest returns session.exitstatus after unconfigure: a rewrite that fails here still
        # fails the run.
        if self.st.session is not None and _owns_the_record(self.st.session, self.st):
            _guarded(_amend_exit_status, self.st.session, self.st)
        if self.st.write_error and not self.st.error_shown:  # no terminal summary (-p no:terminal, exit 3/4)
            print(_error_line(self.st), file=sys.stderr)
            self.st.error_shown = True
