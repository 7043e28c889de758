"""pytest adapter: the `tracker` fixture, per-test outcomes and unit_results.json.

Hooks only translate pytest events into calls on results.py / gpu.py. All state lives in a
per-config object (pytester inner runs in the same process get their own).

Where results go: `--unit-results-dir DIR`, else $TESTHARNESS_RESULTS_DIR, else
`[tool.testharness] results_dir` (default tests/unit) under the pytest rootdir. Without an
explicit dir they are written only when the run concerns a configured test root
(`test_roots`, default tests/unit), so a pytest run on an unrelated directory writes nothing.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Generator, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from testharness import gpu, results
from testharness.settings import (
    Settings,
    SettingsError,
    load_settings,
    session_in_scope,
)

RESULTS_DIR_ENV = "TESTHARNESS_RESULTS_DIR"
SUMMARY_FILE_ENV = "TESTHARNESS_SUMMARY_FILE"  # set by run_unit.sh to learn what was collected


@dataclass
class _State:
    settings: Settings
    results_dir: Path | None = None
    start: datetime = field(default_factory=datetime.now)
    metrics: dict[str, dict[str, Any]] = field(default_factory=dict)
    tests: dict[str, results.OutcomeRecord] = field(default_factory=dict)
    pending: dict[str, tuple[str, float]] = field(default_factory=dict)  # attempt in progress
    hygiene: dict[str, dict[str, Any]] = field(default_factory=dict)  # leaks/hang of the attempt
    gpu_names: set[str] = field(default_factory=set)
    memory_source: str = "none"
    cluster_read: bool = False
    deselected: int = 0
    session: pytest.Session | None = None
    ambiguous_stems: frozenset[str] = frozenset()  # test file names found in two folders
    document: dict[str, Any] | None = None  # what was written, and where
    paths: tuple[Path, ...] = ()
    written_to: str = ""

    def key(self, nodeid: str) -> str:
        return results.metric_key(nodeid, self.ambiguous_stems)


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
    try:
        settings = load_settings(config.rootpath)
    except SettingsError as exc:
        raise pytest.UsageError(str(exc)) from None
    state = _State(settings=settings)
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
    # testpaths are relative to the rootdir; command-line paths to the invocation dir.
    from_testpaths = config.args_source == pytest.Config.ArgsSource.TESTPATHS
    base = config.rootpath if from_testpaths else config.invocation_params.dir
    roots = tuple(r for r in st.settings.test_roots if r.is_dir())
    if session_in_scope(list(config.args), Path(base), roots):
        return st.settings.results_dir
    return None


# --- per-test outcomes -------------------------------------------------------------------


def _phase_outcome(report: pytest.TestReport) -> str:
    """Outcome of one phase report, in the results-file vocabulary."""
    xfail = hasattr(report, "wasxfail")
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


# --- the fixture -------------------------------------------------------------------------


class Tracker:
    """Records metrics for one test under `<module stem>::<test name[param id]>`."""

    def __init__(self, state: _State, key: str) -> None:
        self._state = state
        self._key = key
        self._metrics: dict[str, Any] = {}
        state.metrics[key] = self._metrics  # a rerun replaces the earlier attempt's metrics

    @property
    def key(self) -> str:
        return self._key

    def track(self, name: str, value: Any) -> None:
        """Record a JSON-serialisable value; anything else raises MetricError naming `name`."""
        self._metrics[name] = results.check_metric(name, value)

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
        t._metrics["_elapsed"] = time.perf_counter() - start


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
    path = os.environ.get(SUMMARY_FILE_ENV)
    if not path:
        return
    summary = {
        "exit_status": int(session.exitstatus),
        "collected": session.testscollected,
        "deselected": st.deselected,
        "results": str(st.results_dir / results.RESULTS_NAME) if st.results_dir else None,
    }
    results.write_json_atomic(Path(path), summary)


def _is_xdist_worker(config: pytest.Config) -> bool:
    return hasattr(config, "workerinput")


def _writes_results(config: pytest.Config) -> bool:
    """Runs that execute no test leave no record: they would only dilute the history."""
    return not (config.option.collectonly or config.getoption("shard_plan", False))


def _write(session: pytest.Session, st: _State) -> None:
    if _is_xdist_worker(session.config):
        return  # the controller sees every report (metrics ride on them) and writes once
    for nodeid in list(st.pending):  # an attempt cut short (Ctrl-C, crash) has no teardown
        outcome, dur = st.pending[nodeid]
        st.pending[nodeid] = ("error" if outcome == "passed" else outcome, dur)
        _finish_attempt(st, nodeid)
    _write_summary(session, st)
    if st.results_dir is None or not _writes_results(session.config):
        return
    names = set(st.gpu_names)
    try:
        names.update(gpu.gpu_types())
    except Exception:
        pass
    st.document = results.build_results(
        exit_status=int(session.exitstatus),
        git_commit=results.git_commit(st.settings.root),
        start=st.start,
        metrics=st.metrics,
        gpu_types=sorted(names),
        coverage=_coverage(session.config, st),
        memory_source=st.memory_source,
        tests=st.tests,
        shard=session.config.getoption("shard", None),
    )
    st.paths = results.write_results(st.results_dir, st.document, st.start)
    st.written_to = f"unit results: {st.paths[0]} (copy: {st.paths[1]})"


def _amend_exit_status(session: pytest.Session, st: _State) -> None:
    """A plugin may still change the exit status after the files were written: follow it."""
    status = int(session.exitstatus)
    if st.document is None or st.document["exit_status"] == status:
        return
    st.document["exit_status"] = status
    _write_summary(session, st)
    results.rewrite_results(st.paths, st.document)


_MEMORY_RANK = {"none": 0, "rss": 1, "gpu": 2}  # workers merged: the most telling source wins


class _Recorder:
    """Per-session hooks, registered per config so nested pytester sessions stay apart."""

    def __init__(self, state: _State) -> None:
        self.st = state

    def pytest_sessionstart(self, session: pytest.Session) -> None:
        self.st.start = datetime.now()
        self.st.session = session
        self.st.results_dir = _results_dir(session, self.st)

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        files = {item.nodeid.partition("::")[0] for item in session.items}
        roots = tuple(r for r in self.st.settings.test_roots if r.is_dir())
        files.update(results.test_files_under(roots, session.config.rootpath, session.config.getini("python_files")))
        self.st.ambiguous_stems = results.ambiguous_stems(files)

    def pytest_deselected(self, items: list[pytest.Item]) -> None:
        self.st.deselected += len(items)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, Any, Any]:
        report = yield
        if call.when == "teardown" and _is_xdist_worker(item.config):
            # Carried to the controller with the report (xdist serialises its attributes).
            report.testharness_metrics = self.st.metrics.get(self.st.key(item.nodeid))
            report.testharness_memory = [self.st.memory_source, sorted(self.st.gpu_names)]
        return report

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        st = self.st
        metrics = getattr(report, "testharness_metrics", None)
        if isinstance(metrics, dict):  # from an xdist worker (in the worker: the same dict)
            st.metrics[st.key(report.nodeid)] = metrics
        memory = getattr(report, "testharness_memory", None)
        if isinstance(memory, list) and len(memory) == 2:  # what the worker's get_max_mem saw
            source, names = memory
            if _MEMORY_RANK.get(source, 0) > _MEMORY_RANK.get(st.memory_source, 0):
                st.memory_source = source
            st.gpu_names.update(names)
        for name in ("leaks", "hang"):  # set by testharness.hygiene (xdist carries them)
            value = getattr(report, f"testharness_{name}", None)
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
        if report.when == "teardown":  # every attempt, rerun or not, ends with its teardown
            _finish_attempt(st, report.nodeid)

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

    # The innermost wrapper: its code after `yield` runs once every plain implementation
    # (pytest-testmon's and sharding's trylast ones change the exit status) is done, and
    # before the terminal reporter's wrapper prints the summary with our line.
    @pytest.hookimpl(wrapper=True, trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> Generator[None, None, None]:
        try:
            return (yield)
        finally:
            try:
                _write(session, self.st)
            except Exception as exc:  # never turn a finished session into an internal error
                print(f"testharness: could not write unit results: {exc}", file=sys.stderr)

    def pytest_unconfigure(self, config: pytest.Config) -> None:
        if self.st.session is not None:
            try:
                _amend_exit_status(self.st.session, self.st)
            except Exception as exc:
                print(f"testharness: could not update unit results: {exc}", file=sys.stderr)
