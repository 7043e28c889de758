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
from collections.abc import Iterator
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
    gpu_names: set[str] = field(default_factory=set)
    memory_source: str = "none"
    cluster_read: bool = False
    deselected: int = 0
    started: bool = False
    written: bool = False
    written_to: str = ""


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
    rec = st.tests.setdefault(nodeid, results.OutcomeRecord(key=results.metric_key(nodeid)))
    rec.outcome, rec.duration = outcome, duration
    rec.attempts.append(outcome)


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
    t = Tracker(_state(request.config), results.metric_key(request.node.nodeid))
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


def _write(session: pytest.Session, st: _State) -> None:
    if st.written or not st.started:
        return
    st.written = True
    for nodeid in list(st.pending):  # an attempt cut short (Ctrl-C, crash) has no teardown
        outcome, dur = st.pending[nodeid]
        st.pending[nodeid] = ("error" if outcome == "passed" else outcome, dur)
        _finish_attempt(st, nodeid)
    _write_summary(session, st)
    if st.results_dir is None:
        return
    names = set(st.gpu_names)
    try:
        names.update(gpu.gpu_types())
    except Exception:
        pass
    data = results.build_results(
        exit_status=int(session.exitstatus),
        git_commit=results.git_commit(st.settings.root),
        start=st.start,
        metrics=st.metrics,
        gpu_types=sorted(names),
        coverage=_coverage(session.config, st),
        memory_source=st.memory_source,
        tests=st.tests,
    )
    latest, dated = results.write_results(st.results_dir, data, st.start)
    st.written_to = f"unit results: {latest} (copy: {dated})"


class _Recorder:
    """Per-session hooks, registered per config so nested pytester sessions stay apart."""

    def __init__(self, state: _State) -> None:
        self.st = state

    def pytest_sessionstart(self, session: pytest.Session) -> None:
        self.st.start = datetime.now()
        self.st.started = True
        self.st.results_dir = _results_dir(session, self.st)

    def pytest_deselected(self, items: list[pytest.Item]) -> None:
        self.st.deselected += len(items)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        st = self.st
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

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        try:
            # session.exitstatus, not the argument: it is what pytest will exit with, after
            # earlier hooks changed it (pytest-testmon turns "no tests" into 0 when it deselected them).
            _write(session, self.st)
        except Exception as exc:  # never turn a finished session into an internal error
            print(f"testharness: could not write unit results: {exc}", file=sys.stderr)


