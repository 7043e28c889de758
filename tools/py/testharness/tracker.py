"""pytest adapter: the `tracker` fixture, per-test outcomes and unit_results.json.

Hooks only translate pytest events into calls on results.py / gpu.py. All state lives in a
per-config object (pytester inner runs in the same process get their own).

Where results go: `--unit-results-dir DIR`, else $TESTHARNESS_RESULTS_DIR, else
`[tool.testharness] results_dir` (default tests/unit) under the pytest rootdir. Without an
explicit dir they are written only when the run concerns a configured test root
(`test_roots`, default tests/unit), so a pytest run on an unrelated directory writes nothing;
nor does a project without `[tool.testharness]` (the plugin merely installed: the fixture
records in memory, for `session_record`).

Metric keys are `<file stem>::<test>` and never change because another file was added: where
test files share a name, the one git added first keeps the short keys, the others' keys carry
their path, and collection warns, naming the files (results.path_keyed_files).
"""

from __future__ import annotations

import os
import re
import sys
import threading
import time
import warnings
from collections.abc import Callable, Generator, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from types import MappingProxyType
from typing import Any

import pytest

from testharness import gpu, results
from testharness.contract import get_extra, is_xdist_worker, put_extra, settings_of
from testharness.crash_record import SUMMARY_FILE_ENV, Carried  # the summary: run_unit reads it
from testharness.settings import Settings, session_in_scope

RESULTS_DIR_ENV = "TESTHARNESS_RESULTS_DIR"


@dataclass
class _State:
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
        return results.metric_key(nodeid, self.path_keyed or frozenset())

    def learn_test_files(
        self, rootdir: Path, collected: Iterable[str], patterns: Iterable[str]
    ) -> dict[str, list[str]]:
        """Decide, once per session, which test files' keys carry their path
        (results.path_keyed_files), among the collected files and every test file under the
        test roots, so a key does not depend on what a run selects. Returns the shared names."""
        files = set(collected)
        roots = tuple(r for r in self.settings.test_roots if r.is_dir())
        files.update(results.test_files_under(roots, rootdir, patterns))
        clashes = results.stem_clashes(files)
        if self.path_keyed is None:
            if clashes:
                self.added = results.git_added_times(rootdir, [p for paths in clashes.values() for p in paths])
            self.path_keyed = results.path_keyed_files(clashes, self.added)
        return clashes


_STATE = pytest.StashKey[_State]()


def _state(config: pytest.Config) -> _State:
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
    state = _State(settings=settings_of(config))
    config.stash[_STATE] = state
    if getattr(config.option, "cov_source", None):  # run with --cov
        # Coverage follows Ray workers only when they run this interpreter and environment;
        # Ray's `uv run` hook would start them from a re-packaged copy, unmeasured.
        os.environ.setdefault("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")
    config.pluginmanager.register(_Recorder(state), f"testharness-recorder-{id(config)}")


def _results_dir(session: pytest.Session, st: _State) -> Path | None:
    config = session.config
    explicit = config.getoption("unit_results_dir") or os.environ.get(RESULTS_DIR_ENV)
    if explicit:
        return Path(explicit).resolve()
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
        # A teardown error turns a pass into an error; a failure stays a failure.
        return "error" if phase == "error" and before in ("passed", "xpassed", "skipped") else before
    return phase


def _finish_attempt(st: _State, nodeid: str) -> None:
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


# --- the fixture -------------------------------------------------------------------------


class Tracker:
    """Records metrics for one test under `<file stem>::<test name[param id]>`."""

    def __init__(self, state: _State, key: str) -> None:
        self._state = state
        self._key = key
        self._metrics: dict[str, Any] = {}
        with state.lock:
            state.metrics[key] = self._metrics  # a rerun replaces the earlier attempt's metrics

    @property
    def key(self) -> str:
        return self._key

    def track(self, name: str, value: Any) -> None:
        """Record a JSON-serialisable value; anything else raises MetricError naming `name`."""
        checked = results.check_metric(name, value)
        with self._state.lock:  # a thread of the test may call this while the record is copied
            self._metrics[name] = checked

    def get_max_mem(self) -> float:
        """Largest GPU memory in use (MiB) on any GPU of any node; without GPUs, the peak RSS
        (MiB) of the test process and the Ray workers."""
        reading = gpu.max_memory()
        self._state.memory_source = reading.source
        self._state.gpu_names.update(reading.gpu_names)
        return reading.mib

    def log_max_mem(self, name: str) -> float:
        """track(name, get_max_mem()); returns the value."""
        value = self.get_max_mem()
        self.track(name, value)
        return value


@pytest.fixture
def tracker(request: pytest.FixtureRequest) -> Iterator[Tracker]:
    """Metrics for this test, written to unit_results.json; `_elapsed` is recorded for you."""
    state = _state(request.config)
    t = Tracker(state, state.key(request.node.nodeid))
    start = time.perf_counter()
    try:
        yield t
    finally:
        with state.lock:
            t._metrics["_elapsed"] = time.perf_counter() - start


class SessionRecord(Mapping[str, Any]):
    """What this session's unit_results.json will hold, read live (upstream NeMo RL's
    `session_data`): the keys of the results schema, `metrics` as every tracker of this
    process recorded it so far (a read-only view: record through `tracker`, which checks the
    value and carries it from an xdist worker). `exit_status` is "was not set" until the
    session ends, as upstream's."""

    KEYS = ("exit_status", "git_commit", "start_time", "metrics", "gpu_types", "coverage",
            "memory_unit", "memory_source", "tests")  # fmt: skip

    def __init__(self, config: pytest.Config) -> None:
        self._config = config
        self._state = _state(config)
        self._commit: str | None = None

    def __getitem__(self, key: str) -> Any:
        st = self._state
        if key == "exit_status":
            return st.document["exit_status"] if st.document is not None else "was not set"
        if key == "git_commit":
            if self._commit is None:
                self._commit = results.git_commit(st.settings.root)
            return self._commit
        if key == "start_time":
            return st.start.strftime(results.START_TIME_FORMAT)
        if key == "metrics":
            return MappingProxyType(st.metrics)
        if key == "gpu_types":
            return sorted(st.gpu_names)
        if key == "coverage":
            return _coverage(self._config, st)
        if key == "memory_unit":
            return results.MEMORY_UNIT
        if key == "memory_source":
            return st.memory_source
        if key == "tests":
            return {nodeid: rec.as_json() for nodeid, rec in st.tests.items()}
        raise KeyError(key)

    def __iter__(self) -> Iterator[str]:
        return iter(self.KEYS)

    def __len__(self) -> int:
        return len(self.KEYS)


def session_record(config: pytest.Config) -> SessionRecord:
    """The live record of this session (see SessionRecord); a clear error without the tracker."""
    if _STATE not in config.stash:
        raise RuntimeError("session_record: the testharness tracker plugin is not active in this run")
    return SessionRecord(config)


# --- what a supervised run hands on (testharness.supervised) -------------------------------


def is_active(config: pytest.Config) -> bool:
    return _STATE in config.stash


def test_key(config: pytest.Config, nodeid: str) -> str:
    return _state(config).key(nodeid)


def session_line(config: pytest.Config) -> dict[str, Any]:
    """Where this session's record goes and when it started, for the supervisor to write it
    should the process die."""
    st = _state(config)
    target = st.results_dir if _writes_results(config) else None
    return {
        "results_dir": str(target) if target is not None else None,
        "start": st.start.strftime(results.START_TIME_FORMAT),
        "shard": config.getoption("shard", None),
        "root": str(st.settings.root),
    }


def finished_line(config: pytest.Config, nodeid: str) -> dict[str, Any] | None:
    """A finished test's entry, metrics and memory readings, as the record would hold them."""
    st = _state(config)
    rec = st.tests.get(nodeid)
    if rec is None or nodeid in st.pending:
        return None
    with st.lock:  # a copy: a thread the test left running may still be tracking
        metrics = st.metrics.get(rec.key)
        metrics = dict(metrics) if metrics is not None else None
    return {"test": nodeid, "record": rec.as_json(), "metrics": metrics,
            "memory": [st.memory_source, sorted(st.gpu_names)]}  # fmt: skip


def carry_in(config: pytest.Config, carried: Carried) -> None:
    """Take what the earlier rounds of a supervised run recorded: this session's record then
    lists every test of the run, from the first round's start."""
    st = _state(config)
    if carried.start:
        st.start = datetime.strptime(carried.start, results.START_TIME_FORMAT)
    for nodeid, entry in carried.tests.items():
        st.tests[nodeid] = results.OutcomeRecord.from_json(entry)
    with st.lock:
        st.metrics.update({key: dict(values) for key, values in carried.metrics.items()})
    if results.MEMORY_RANK.get(carried.memory_source, 0) > results.MEMORY_RANK.get(st.memory_source, 0):
        st.memory_source = carried.memory_source
    st.gpu_names.update(carried.gpu_names)


# --- session end -------------------------------------------------------------------------


def _coverage(config: pytest.Config, st: _State) -> float | str:
    plugin = config.pluginmanager.getplugin("_cov")
    total = getattr(plugin, "cov_total", None)
    if isinstance(total, (int, float)):
        return float(total)
    pkg = st.settings.source_packages[0] if st.settings.source_packages else "<your package>"
    if plugin is not None and getattr(plugin, "cov_controller", None) is not None:
        return "not measured: no coverage report (session interrupted, or --cov-report= empty)"
    return f"not measured: run with --cov={pkg}"


def _write_summary(session: pytest.Session, st: _State) -> None:
    """What run_unit reads to word its last line (TESTHARNESS_SUMMARY_FILE, set by it)."""
    path = os.environ.get(SUMMARY_FILE_ENV)
    if not path:
        return
    summary = {
        "exit_status": int(session.exitstatus),
        "tests_exit_status": int(session.exitstatus) if st.tests_status is None else st.tests_status,
        "collected": session.testscollected,
        "deselected": st.deselected,
        "results": str(st.paths[0]) if st.paths else None,
        "results_error": st.write_error or None,
        "stopped": st.stopped,
    }
    try:
        results.write_json_atomic(Path(path), summary)
    except OSError as exc:  # run_unit then words its line from the exit status alone
        print(f"testharness: could not write the run summary {path}: {exc}", file=sys.stderr)


def _writes_results(config: pytest.Config) -> bool:
    """Runs that execute no test leave no record: they would only dilute the history."""
    return not (config.option.collectonly or config.getoption("shard_plan", False))


def _owns_the_record(session: pytest.Session, st: _State) -> bool:
    """Only the session's own process writes: not an xdist worker (the controller sees every
    report, metrics ride on them, and writes once), nor a child a test forked."""
    return not is_xdist_worker(session.config) and os.getpid() == st.pid


def _fail_write(session: pytest.Session, st: _State, reason: str) -> None:
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


def _write(session: pytest.Session, st: _State) -> None:
    if not _owns_the_record(session, st):
        return
    for nodeid in list(st.pending):  # an attempt cut short (Ctrl-C, crash) has no teardown
        outcome, dur = st.pending[nodeid]
        st.pending[nodeid] = ("error" if outcome == "passed" else outcome, dur)
        _finish_attempt(st, nodeid)
    try:
        _write_results(session, st)
    except Exception as exc:  # ResultsWriteError is one line already; anything else: its type too
        reason = str(exc) if isinstance(exc, results.ResultsWriteError) else f"{type(exc).__name__}: {exc}"
        _fail_write(session, st, reason)
    _write_summary(session, st)


def _write_results(session: pytest.Session, st: _State) -> None:
    if st.results_dir is None or not _writes_results(session.config):
        return
    names = set(st.gpu_names)
    try:
        names.update(gpu.gpu_types())
    except Exception:
        pass
    with st.lock:  # a copy: a thread the test left running may still be tracking
        metrics = {key: dict(values) for key, values in st.metrics.items()}
    st.document = results.build_results(
        exit_status=int(session.exitstatus),
        git_commit=results.git_commit(st.settings.root),
        start=st.start,
        metrics=metrics,
        gpu_types=sorted(names),
        coverage=_coverage(session.config, st),
        memory_source=st.memory_source,
        tests=st.tests,
        shard=session.config.getoption("shard", None),
    )
    st.paths = results.write_results(st.results_dir, st.document, st.start)
    st.written_to = f"unit results: {st.paths[0]} (copy: {st.paths[1]})"


def _amend_exit_status(session: pytest.Session, st: _State) -> None:
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
    _write_summary(session, st)


def _guarded(step: Callable[[pytest.Session, _State], None], session: pytest.Session, st: _State) -> None:
    """Run a session-end step; an unexpected error in it is a failed write (one line, exit 3),
    never a traceback that pytest would turn into an internal error of its own."""
    try:
        step(session, st)
    except Exception as exc:
        _fail_write(session, st, f"{type(exc).__name__}: {exc}")
        _write_summary(session, st)


def _error_line(st: _State) -> str:
    return f"testharness: the unit results were not written: {st.write_error} (exit status 3)"


def _stop_cause(exc: BaseException) -> dict[str, str]:
    """What ended the session early, for run_unit's last line: `by` is "signal" (a stop signal
    sent to pytest itself), "collection" (errors during collection), "pytest" (pytest or a
    plugin stopped the run: --sw after a failure, xdist's --maxfail), "exit" (pytest.exit) or
    "KeyboardInterrupt" (raised by a test or a plugin); `reason` is pytest's words."""
    reason = str(exc)
    if isinstance(exc, pytest.exit.Exception):
        return {"by": "exit", "reason": exc.msg}
    if type(exc).__module__ == "testharness.interrupts":
        return {"by": "signal", "reason": reason}
    if type(exc) is KeyboardInterrupt:
        return {"by": "KeyboardInterrupt", "reason": reason}
    if re.fullmatch(r"\d+ errors? during collection", reason):
        return {"by": "collection", "reason": reason}
    return {"by": "pytest", "reason": reason}  # pytest's Interrupted(session.shouldstop), xdist's


def _warn_clash(stem: str, paths: list[str], st: _State, rootdir: Path) -> None:
    """One collection warning per shared file name, naming every file and its keys."""
    path_keyed = st.path_keyed or frozenset()
    owner = next((p for p in paths if p not in path_keyed), paths[0])
    others = [p for p in paths if p != owner]
    first = owner in st.added and all(st.added.get(p, float("inf")) > st.added[owner] for p in others)
    long_keys = "; ".join(f"{p} gets {results.metric_key(p + '::', path_keyed)}<test>" for p in others)
    reason = "git added it first" if first else "the first by path: git does not tell them apart"
    message = (
        f"metric keys: test files share the name {stem}.py. {owner} keeps {stem}::<test> ({reason}); "
        f"{long_keys}. Rename one of them to give each file short keys of its own."
    )
    file = rootdir / owner if not Path(owner).is_absolute() else Path(owner)
    warnings.warn_explicit(pytest.PytestCollectionWarning(message), pytest.PytestCollectionWarning, str(file), 1)


class _Recorder:
    """Per-session hooks, registered per config so nested pytester sessions stay apart."""

    def __init__(self, state: _State) -> None:
        self.st = state

    def pytest_sessionstart(self, session: pytest.Session) -> None:
        self.st.start = datetime.now()
        self.st.session = session
        self.st.results_dir = _results_dir(session, self.st)
        if self.st.results_dir is not None and _writes_results(session.config) and _owns_the_record(session, self.st):
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
            if results.MEMORY_RANK.get(source, 0) > results.MEMORY_RANK.get(st.memory_source, 0):
                st.memory_source = source
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
        self.st.stopped = _stop_cause(excinfo.value)

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_teardown(self, item: pytest.Item) -> None:
        # Read the cluster's GPU names once while Ray is surely up: the last test's teardown
        # also tears down the session fixture that stops Ray.
        if not self.st.cluster_read and gpu.ray_connected():
            self.st.cluster_read = True
            try:
                for node in gpu.cluster_readings():
                    self.st.gpu_names.update(node.gpu_names)
            except Exception:
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
