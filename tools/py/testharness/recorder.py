"""pytest adapter: the results recorder: per-test outcomes and unit_results.json (the `tracker`
fixture, which records metrics into it, is testharness.tracker's).

Hooks only translate pytest events into calls on the run's record (testharness.record, which
builds and writes the files) and gpu.py. The record is per config, in its stash
(contract.record_of: pytester inner runs in the same process get their own).

Where results go: `--unit-results-dir DIR`, else $TESTHARNESS_RESULTS_DIR, else
`[tool.testharness] results_dir` (default: the first test root) under the pytest rootdir.
Without an explicit dir they are written only when the run concerns a configured test root
(`test_roots`, default pytest's testpaths), so a pytest run on an unrelated directory writes nothing;
nor does a project without `[tool.testharness]` (the plugin merely installed: the fixture
records in memory, for `session_record`).

Metric keys are `<file stem>::<test>` and never change because another file was added: where
test files share a name, the one git added first keeps the short keys, the others' keys carry
their path, and collection warns, naming the files (metrics.path_keyed_files), when a test of
such a file that the run collected uses the tracker (its metrics get the long keys).
"""

from __future__ import annotations

import os
import sys
import warnings
from collections.abc import Callable, Generator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from testharness import gpu, real_ray, results, run_summary
from testharness.contract import (
    get_extra,
    is_xdist_worker,
    put_extra,
    register_for,
    run_of,
    settings_of,
    stash_record,
)
from testharness.exit_codes import USAGE_ERROR
from testharness.history import RESULTS_DIR_ENV, sent_results_dir
from testharness.metrics import clash_message
from testharness.record import Record
from testharness.run_binding import supervisor_gone
from testharness.settings import Settings, session_in_scope


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


@pytest.hookimpl(wrapper=True)
def pytest_load_initial_conftests(early_config: pytest.Config, args: list[str]) -> Generator[None, None, None]:
    """A conftest.py that does not import ends pytest before its session (exit 4): the record
    says so, and the previous run's is not left standing as this one's."""
    try:
        return (yield)
    except Exception as exc:
        known = early_config.known_args_namespace
        if type(exc).__name__ == "ConftestImportFailure" and not (known.help or known.version):
            _record_unimportable_conftest(early_config, exc)
        raise


def _record_unimportable_conftest(config: pytest.Config, exc: Exception) -> None:
    cause, path = getattr(exc, "cause", exc), getattr(exc, "path", None)
    where = os.path.relpath(path, config.invocation_params.dir) if path is not None else "a conftest.py"
    line = f"{where} could not be imported: {type(cause).__name__}: {' '.join(str(cause).split())}"
    try:
        settings = settings_of(config)
    except pytest.UsageError:
        return  # a malformed [tool.testharness]: no record, said by the settings' own line
    run = run_of(config)
    if os.environ.get("PYTEST_XDIST_WORKER") or supervisor_gone(run):
        return
    # A pytest inside run_unit's run without being its own writes only where its command says.
    results_dir = sent_results_dir(config.known_args_namespace.unit_results_dir, {} if run.nested else None)
    if results_dir is None and settings.configured and not run.nested:
        paths = list(config.known_args_namespace.file_or_dir or ())
        base = config.invocation_params.dir if paths else config.rootpath
        roots = tuple(r for r in settings.test_roots if r.is_dir())
        if session_in_scope(paths or list(config.getini("testpaths")), Path(base), roots):
            results_dir = settings.results_dir
    record = Record(root=settings.root, test_roots=settings.test_roots, start=datetime.now())
    record.begin(results_dir, True, None)
    record.clear_previous()
    record.add_error(where, line)
    status = record.close(USAGE_ERROR, "not measured: no test ran (a conftest.py did not import)")
    run_summary.write_before_collection(record, status, line, run.summary_file)
    if record.write_error:
        print(record.error_line(), file=sys.stderr)


def pytest_configure(config: pytest.Config) -> None:
    settings = settings_of(config)
    record = Record(root=settings.root, test_roots=settings.test_roots, start=datetime.now())
    stash_record(config, record)
    if getattr(config.option, "cov_source", None):  # run with --cov
        # Coverage follows Ray workers only when they run this interpreter and environment;
        # Ray's `uv run` hook would start them from a re-packaged copy, unmeasured.
        os.environ.setdefault("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")
    register_for(config, _Recorder(record, settings), "testharness-recorder")


def _results_dir(session: pytest.Session, settings: Settings) -> Path | None:
    config = session.config
    nested = run_of(config).nested  # inside run_unit's run without being its pytest: its record is not ours
    sent = sent_results_dir(config.getoption("unit_results_dir"), {} if nested else None)
    if sent is not None or nested:
        return sent
    if not settings.configured:
        return None  # a project that never asked for a results file gets none
    # testpaths are relative to the rootdir; command-line paths to the invocation dir.
    from_testpaths = config.args_source == pytest.Config.ArgsSource.TESTPATHS
    base = config.rootpath if from_testpaths else config.invocation_params.dir
    roots = tuple(r for r in settings.test_roots if r.is_dir())
    if session_in_scope(list(config.args), Path(base), roots):
        return settings.results_dir
    return None


def writes_results(config: pytest.Config) -> bool:
    """Runs that execute no test leave no record: they would only dilute the history."""
    return not (config.option.collectonly or config.getoption("shard_plan", False))


def _owns_the_record(session: pytest.Session, st: Record) -> bool:
    """Only the session's own process writes: not an xdist worker (the controller sees every
    report, metrics ride on them, and writes once), nor a child a test forked, nor a pytest
    whose run_unit is gone (killed: a later run's files may be there by now)."""
    config = session.config
    return not is_xdist_worker(config) and st.owned_here() and not supervisor_gone(run_of(config))


def _gpu_types() -> list[str]:
    try:
        return gpu.gpu_types()
    except Exception:  # noqa: BLE001  GPU names are extra: never a lost record for them
        return []


TRACKER = "tracker"  # the fixture that records metrics (testharness.tracker)


def _fixtures(item: pytest.Item) -> tuple[str, ...]:
    return tuple(getattr(item, "fixturenames", ()))


def _warn_clash(stem: str, paths: list[str], st: Record, rootdir: Path) -> None:
    """One collection warning per shared file name, naming every file and its keys."""
    owner, message = clash_message(stem, paths, st.path_keyed or frozenset(), st.added)
    file = rootdir / owner if not Path(owner).is_absolute() else Path(owner)
    warnings.warn_explicit(pytest.PytestCollectionWarning(message), pytest.PytestCollectionWarning, str(file), 1)


class _Recorder:
    """Per-session hooks, registered per config so nested pytester sessions stay apart. They
    translate pytest's events into calls on the record (testharness.record)."""

    def __init__(self, record: Record, settings: Settings) -> None:
        self.st = record
        self.settings = settings
        self.session: pytest.Session | None = None
        self.cluster_read = False  # the cluster's GPU names were read
        self.error_shown = False  # the line saying the record was not written

    def pytest_sessionstart(self, session: pytest.Session) -> None:
        self.session = session
        config = session.config
        self.st.begin(_results_dir(session, self.settings), writes_results(config), config.getoption("shard", None))
        if _owns_the_record(session, self.st):
            self.st.clear_previous()

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        config = session.config
        collected = {item.nodeid.partition("::")[0] for item in session.items}
        clashes = self.st.learn_test_files(config.rootpath, collected, config.getini("python_files"))
        # Said where it matters: where this run records metrics under a long key. A tree with
        # many same-named files that track nothing (upstream NeMo RL's test_utils.py) warns of none.
        tracking = {item.nodeid.partition("::")[0] for item in session.items if TRACKER in _fixtures(item)}
        for stem, paths in clashes.items():
            if tracking & (self.st.path_keyed or frozenset()) & set(paths):
                _warn_clash(stem, paths, self.st, config.rootpath)

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_node_collection_finished(self, node: Any, ids: list[str]) -> None:
        # The xdist controller collects nothing itself: it learns the files from a worker's
        # collection (the same in every worker) to key the metrics the workers send.
        if self.st.path_keyed is None and self.session is not None:
            config = self.session.config
            collected = {nodeid.partition("::")[0] for nodeid in ids}
            self.st.learn_test_files(config.rootpath, collected, config.getini("python_files"))

    def pytest_deselected(self, items: list[pytest.Item]) -> None:
        self.st.note_deselected(len(items))
        workeroutput = getattr(self.session.config, "workeroutput", None) if self.session else None
        if isinstance(workeroutput, dict):  # an xdist worker: its count goes to the controller
            workeroutput["testharness_deselected"] = self.st.deselected

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node: Any, error: Any) -> None:
        # Every worker collects (and deselects) the same tests: the controller takes one count.
        found = getattr(node, "workeroutput", {}).get("testharness_deselected")
        if isinstance(found, int):
            self.st.deselected = max(self.st.deselected, found)

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        # (xdist hands the controller its workers' failed and skipped collection reports.)
        if report.failed:  # a test file that does not import: in the record, with pytest's error
            self.st.add_error(report.nodeid, results.error_line(str(report.longrepr)))
        elif report.skipped and isinstance(report.longrepr, (tuple, list)) and len(report.longrepr) == 3:
            reason = str(report.longrepr[2]).removeprefix("Skipped: ")  # pytest.skip(allow_module_level=True)
            self.st.skipped_files[report.nodeid or str(report.longrepr[0])] = reason

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, Any, Any]:
        report = yield
        if call.when == "teardown" and is_xdist_worker(item.config):
            # Carried to the controller with the report (xdist serialises its attributes).
            put_extra(report, "testharness_metrics", self.st.metrics_of(self.st.key(item.nodeid)))
            put_extra(report, "testharness_memory", self.st.memory())
        return report

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        st = self.st
        found = get_extra(report, "testharness_metrics")
        if isinstance(found, dict):  # from an xdist worker (in the worker: the same dict)
            st.take_metrics(st.key(report.nodeid), found)
        memory = get_extra(report, "testharness_memory")
        if isinstance(memory, list) and len(memory) == 2:  # what the worker's get_max_mem saw
            st.merge_memory(memory[0], memory[1])
        # leaks, hang: set by testharness.hygiene (xdist carries them); crash: by
        # testharness.supervised on the report of a test that killed its xdist worker
        st.note_extras(report.nodeid, *(get_extra(report, f"testharness_{n}") for n in ("leaks", "hang", "crash")))
        st.log_phase(report.nodeid, report.when, str(report.outcome), report.duration, hasattr(report, "wasxfail"))

    def pytest_keyboard_interrupt(self, excinfo: pytest.ExceptionInfo[BaseException]) -> None:
        self.st.note_stop(run_summary.stop_cause(excinfo.value))

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_teardown(self, item: pytest.Item) -> None:
        # Read the cluster's GPU names once while Ray is surely up: the last test's teardown
        # also tears down the session fixture that stops Ray.
        if not self.cluster_read and real_ray.connected() is not None:
            self.cluster_read = True
            try:
                names = [name for node in gpu.cluster_readings() for name in node.gpu_names]
            except Exception:  # noqa: BLE001  GPU names are extra: never a failed teardown for them
                return
            self.st.merge_memory("none", names)

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        # Called by the terminal reporter after every pytest_sessionfinish implementation.
        if self.st.written_to():
            terminalreporter.write_line(self.st.written_to())
        if self.st.write_error:
            terminalreporter.write_line(self.st.error_line(), red=True, bold=True)
            self.error_shown = True

    # The innermost wrapper: its code after `yield` runs once every plain implementation
    # (pytest-testmon's and sharding's trylast ones change the exit status) is done, and
    # before the terminal reporter's wrapper prints the summary with our line.
    @pytest.hookimpl(wrapper=True, trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> Generator[None, None, None]:
        try:
            return (yield)
        finally:
            self._guarded(self._close, session)  # a record it cannot write fails the run (exit 3), one line

    def pytest_unconfigure(self, config: pytest.Config) -> None:
        # pytest returns session.exitstatus after unconfigure: a rewrite that fails here still
        # fails the run.
        if self.session is not None and _owns_the_record(self.session, self.st):
            self._guarded(self._amend_exit_status, self.session)
        if self.st.write_error and not self.error_shown:  # no terminal summary (-p no:terminal, exit 3/4)
            print(self.st.error_line(), file=sys.stderr)
            self.error_shown = True

    def _close(self, session: pytest.Session) -> None:
        nested = run_of(session.config).nested and not is_xdist_worker(session.config)
        if nested and self.st.results_dir is None and self.settings.configured:
            print("testharness: this pytest runs inside run_unit's run without being its pytest: it writes "
                  "no record there (--unit-results-dir DIR writes one)", file=sys.stderr)  # fmt: skip
        if not _owns_the_record(session, self.st):
            if supervisor_gone(run_of(session.config)):
                print("testharness: run_unit, which started this pytest, is gone: no record written", file=sys.stderr)
            return
        names = _gpu_types() if self.st.results_dir is not None else []
        cov = results.coverage_of(session.config.pluginmanager.getplugin("_cov"), self.settings.source_packages)
        status = self.st.close(int(session.exitstatus), cov, names)
        if status != session.exitstatus:  # the record could not be written: INTERNAL_ERROR
            session.exitstatus = status
        run_summary.write(session, self.st, run_of(session.config).summary_file)

    def _amend_exit_status(self, session: pytest.Session) -> None:
        """A plugin may still change the exit status after the files were written: they follow it."""
        status = self.st.amend_exit_status(int(session.exitstatus))
        if status is not None:
            session.exitstatus = status
            run_summary.write(session, self.st, run_of(session.config).summary_file)

    def _guarded(self, step: Callable[[pytest.Session], None], session: pytest.Session) -> None:
        """Run a session-end step; an unexpected error in it is a failed write (one line, exit 3),
        never a traceback that pytest would turn into an internal error of its own."""
        try:
            step(session)
        except Exception as exc:  # noqa: BLE001  any error: the run's one line and exit 3, as documented
            session.exitstatus = self.st.fail_write(f"{type(exc).__name__}: {exc}", int(session.exitstatus))
            run_summary.write(session, self.st, run_of(session.config).summary_file)
