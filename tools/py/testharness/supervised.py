"""pytest adapter of crash supervision: what run_unit's supervisor needs to write the record of
a pytest process that dies, and to go on without it (files: testharness.crash_record).

Active only in run_unit's own pytest and its xdist workers (testharness.run_binding: bound to
the run by their place in the process tree, never by an environment a test's own pytest
inherits); a plain `pytest` run is untouched. In every process that runs tests (pytest, or
each xdist worker) it keeps a breadcrumb of the test in progress, with its watchdog's deadline
(`set_deadline`, on the `pytest_testharness_test_deadline` hook that hygiene's watchdog calls),
and points faulthandler at a file (a fatal signal's stacks; SIGUSR2 dumps the stacks on
demand, when no handler of the project's owns it). The process that owns the record journals the session, the selection and each finished test. A continuation round
(TESTHARNESS_ONLY_TESTS: a JSON list of node ids) runs only the tests an earlier round did not
reach, and takes what the earlier rounds recorded (TESTHARNESS_CARRIED) into its record.
Under -n the report of a test that killed its worker gets the worker's fatal stack, or the
supervisor's verdict when it killed a stuck worker (`report.testharness_crash`).

The journal also says where pytest was should it die outside a test: the session's end began
(`ending`), its main returned (`returned`: only Python's exit, atexit handlers and threads,
are left), and each breadcrumb says when only the fixtures around its test are left to tear
down (`around`): a module or session fixture that kills the process is not the test's crash.
A continuation round gives a test that crashed and that --rerun-failures may run again the
reruns it has left (a `flaky` marker, which pytest-rerunfailures reads before --reruns).
"""

from __future__ import annotations

import contextlib
import dataclasses
import faulthandler
import json
import os
import signal
import threading
import time
from collections.abc import Generator
from pathlib import Path
from typing import IO, Any

import pytest

from testharness import crash_record
from testharness.contract import is_xdist_controller, is_xdist_worker, put_extra, record_of, register_for, run_of
from testharness.crash_record import DUMP_SIGNAL
from testharness.exit_codes import FRESH_PROCESS, USAGE_ERROR
from testharness.record import Record
from testharness.run_binding import Binding, this_process

# One test at a time per process: the breadcrumb in progress, for set_deadline.
_CURRENT: tuple[Path, crash_record.Breadcrumb] | None = None
_FAULT_FILE: IO[str] | None = None  # this process's faulthandler file (kept open: it writes to the descriptor)


def _fault_file(directory: Path) -> IO[str]:
    """This process's faulthandler file in the round's directory, opened once (appended to)."""
    global _FAULT_FILE
    path = crash_record.fault_path(directory, os.getpid())
    if _FAULT_FILE is None or _FAULT_FILE.name != str(path):
        path.parent.mkdir(exist_ok=True)  # in the round's directory, which only the supervisor makes
        _FAULT_FILE = open(path, "a", encoding="utf-8")  # noqa: SIM115
    return _FAULT_FILE


def _watch_the_start() -> None:
    """As the plugin is imported (before any conftest.py: an entry point): a fatal error while
    conftest files and plugins load has its stack in the round's file (pytest's own
    faulthandler starts at configure, and its capture hides stderr before that)."""
    directory = this_process().supervise_dir  # decided here, before any conftest reads the environment
    if directory is not None and not faulthandler.is_enabled():
        with contextlib.suppress(OSError):
            faulthandler.enable(file=_fault_file(directory), all_threads=True)


_watch_the_start()


def set_deadline(seconds: float | None) -> None:
    """The watchdog of the test in progress was (re)armed to fire in `seconds` (None: off).
    The supervisor ends this process when it is still in that test some seconds after that:
    the watchdog could not run (a C call holding the GIL, signals blocked)."""
    _update_breadcrumb(deadline=None if seconds is None else time.time() + seconds)


def pytest_testharness_test_deadline(config: pytest.Config, seconds: float | None) -> None:
    set_deadline(seconds)  # hygiene's watchdog was (re)armed


def _update_breadcrumb(**changes: Any) -> None:
    global _CURRENT
    if _CURRENT is None or _CURRENT[1].pid != os.getpid():
        return
    directory, crumb = _CURRENT
    _CURRENT = (directory, dataclasses.replace(crumb, **changes))
    with contextlib.suppress(OSError):
        crash_record.write_breadcrumb(directory, _CURRENT[1])


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_cmdline_main(config: pytest.Config) -> Generator[None, Any, Any]:
    """Journal what pytest's main returned: after it, only Python's exit (atexit handlers, the
    wait for threads left running) stands between the session's status and the exit code."""
    try:
        code = yield
    except pytest.UsageError as exc:  # a path that does not exist: pytest's main prints it, exits 4
        _journal_return(config, USAGE_ERROR, {"usage_error": " ".join(str(exc).split())})
        raise
    if isinstance(code, int):
        _journal_return(config, int(code), {})
    return code


def _journal_return(config: pytest.Config, code: int, extra: dict[str, str]) -> None:
    directory = run_of(config).supervise_dir  # None in a pytester run inside the session's process
    if directory is not None and not is_xdist_worker(config):
        # The threads Python's exit will wait for: named, should one never end.
        waited = [t.name for t in threading.enumerate() if t is not threading.main_thread() and not t.daemon]
        with contextlib.suppress(OSError):
            crash_record.append_line(directory / crash_record.JOURNAL, {"returned": code, "threads": waited, **extra})


@pytest.hookimpl(trylast=True)  # after the recorder's: the record is in the config
def pytest_configure(config: pytest.Config) -> None:
    run = run_of(config)
    record = record_of(config)
    if run.supervise_dir is not None and record is not None:
        supervised = _Supervised(config, record, run)
        register_for(config, supervised, "testharness-supervised")


class _Supervised:
    def __init__(self, config: pytest.Config, record: Record, run: Binding) -> None:
        assert run.supervise_dir is not None
        self.config = config
        self.record = record
        self.dir = run.supervise_dir
        self.pid = os.getpid()
        self.owner = not is_xdist_worker(config)  # writes the journal (xdist: the controller)
        self.fault_file: IO[str] | None = None
        self.selected_written = False
        self.poisoned: str | None = None  # a sticky CUDA error a test left in this process
        self.own_fixtures = 0  # function-scoped fixtures of the test in progress not torn down yet
        self.tearing_down: pytest.Item | None = None  # the test whose teardown leaves its scopes
        only, carried = run.only_file, run.carried_file
        self.only = frozenset(json.loads(only.read_text(encoding="utf-8"))) if only else None
        # What earlier rounds recorded: taken into this session's record by its owner.
        self.carried = Record.read_carried(carried) if carried and self.owner else None

    def _journal(self, entry: dict[str, Any]) -> None:
        if self.owner and os.getpid() == self.pid:
            with contextlib.suppress(OSError):  # a full disk: the record says so, not a crash in a hook
                crash_record.append_line(self.dir / crash_record.JOURNAL, entry)

    @pytest.hookimpl(trylast=True)  # after the tracker's: its start and results dir are set
    def pytest_sessionstart(self, session: pytest.Session) -> None:
        for sub in (crash_record.RUNNING, crash_record.FAULTS):
            (self.dir / sub).mkdir(parents=True, exist_ok=True)
        # Asked now, not at configure: plan first (testharness.parallel) may have turned a
        # `-n N` run with nothing for workers to do into an in-process one.
        if not is_xdist_controller(self.config):
            # Kept open for the life of the process: faulthandler writes to its descriptor.
            self.fault_file = _fault_file(self.dir)
            faulthandler.enable(file=self.fault_file, all_threads=True)
            if signal.getsignal(DUMP_SIGNAL) == signal.SIG_DFL:
                faulthandler.register(DUMP_SIGNAL, file=self.fault_file, all_threads=True)
        if self.carried is not None:
            self.record.carry_in(self.carried)
        self._journal({"session": self.record.session_entry()})

    # The outermost wrapper (registered after sharding's, also tryfirst): it filters after every
    # other plugin's selection, so --shard plans its shard over the whole selection, as the
    # first round did.
    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_collection_modifyitems(
        self, config: pytest.Config, items: list[pytest.Item]
    ) -> Generator[None, None, None]:
        result = yield
        if self.only is None:
            return result
        keep = [item for item in items if item.nodeid in self.only]
        dropped = [item for item in items if item.nodeid not in self.only]
        if dropped:
            config.hook.pytest_deselected(items=dropped)
            items[:] = keep
        self._reruns_left(items)
        return result

    def _reruns_left(self, items: list[pytest.Item]) -> None:
        """A crashed test run again (--rerun-failures) gets the reruns its crashes left it."""
        reruns = self.config.getoption("reruns", None)
        if (
            self.carried is None
            or not isinstance(reruns, int)
            or not self.config.pluginmanager.has_plugin("rerunfailures")
        ):
            return
        for item in items:
            left = self.carried.reruns_left(item.nodeid, reruns)  # attempts so far count against it
            if left is not None:
                item.add_marker(pytest.mark.flaky(reruns=left), append=False)

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        if not is_xdist_worker(self.config):
            self._journal({"selected": [item.nodeid for item in session.items]})

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_node_collection_finished(self, node: Any, ids: list[str]) -> None:
        if not self.selected_written:  # every worker collects the same
            self.selected_written = True
            self._journal({"selected": list(ids)})

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_runtest_protocol(self, item: pytest.Item, nextitem: pytest.Item | None) -> Generator[None, Any, Any]:
        global _CURRENT
        crumb = crash_record.Breadcrumb(item.nodeid, self.record.key(item.nodeid), os.getpid(), time.time())
        _CURRENT = (self.dir, crumb)
        crash_record.write_breadcrumb(self.dir, crumb)
        try:
            result = yield
        finally:
            if os.getpid() == crumb.pid:  # not in a child the test forked
                _CURRENT = None
                crash_record.clear_breadcrumb(self.dir, crumb.pid)
        if self.poisoned is not None and nextitem is not None and self.owner:
            # Every later CUDA call of this process would fail: the supervisor goes on with the
            # tests not run yet in a fresh one (its journal says why this process ends).
            self._journal({"fresh_process": item.nodeid, "cause": self.poisoned})
            os._exit(FRESH_PROCESS)
        return result

    # Where a process dies in a test's teardown: in the test's own fixtures (its crash), or in
    # the module, class or session fixtures around it, torn down after the last test inside them.
    @pytest.hookimpl(wrapper=True)
    def pytest_fixture_setup(self, fixturedef: pytest.FixtureDef[Any]) -> Generator[None, Any, Any]:
        if fixturedef.scope == "function":
            self.own_fixtures += 1  # counted before it runs: its teardown is registered already
        return (yield)

    def pytest_fixture_post_finalizer(self, fixturedef: pytest.FixtureDef[Any]) -> None:
        if fixturedef.scope == "function":
            self.own_fixtures = max(0, self.own_fixtures - 1)
            if self.own_fixtures == 0 and self.tearing_down is not None:
                self._only_around_left(self.tearing_down)

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_runtest_teardown(self, item: pytest.Item, nextitem: pytest.Item | None) -> Generator[None, Any, Any]:
        if nextitem is None or nextitem.listchain()[:-1] != item.listchain()[:-1]:
            self.tearing_down = item  # this teardown leaves a module, class or the session
            if self.own_fixtures == 0:
                self._only_around_left(item)
        try:
            return (yield)
        finally:
            self.tearing_down, self.own_fixtures = None, 0

    def _only_around_left(self, item: pytest.Item) -> None:
        _update_breadcrumb(around=self.record.outcome_so_far(item.nodeid))

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, Any, Any]:
        report = yield
        error = crash_record.sticky_cuda_error(str(call.excinfo.value)) if call.excinfo is not None else None
        if error is not None and self.poisoned is None:
            self.poisoned = error
            fresh = "the run goes on in a fresh process" if self.owner else "under -n the worker keeps it"
            cause = f"{error}: the CUDA context of the test process is unusable after it ({fresh})"
            put_extra(
                report, "testharness_crash", {"cause": cause, "stack": crash_record.clip(str(report.longreprtext))}
            )
        return report

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> Generator[None, None, None]:
        if self.owner and report.when not in ("setup", "call", "teardown"):
            put_extra(report, "testharness_crash", self._worker_crash(report.nodeid))  # xdist: its worker died
        yield
        if report.when not in ("setup", "call"):  # the teardown, or its worker's crash
            line = self.record.journal_entry(report.nodeid)
            if line is not None:
                self._journal(line)

    def _worker_crash(self, nodeid: str) -> dict[str, str]:
        """Why the worker running `nodeid` died: the supervisor's verdict (it killed the worker
        stuck past its deadline), else the fatal error its faulthandler wrote, if any."""
        crumb = next((c for c in crash_record.read_breadcrumbs(self.dir) if c.nodeid == nodeid), None)
        if crumb is None:
            return {"cause": "its xdist worker died", "stack": ""}
        crash_record.clear_breadcrumb(self.dir, crumb.pid)  # blamed once: the worker is gone
        verdict = crash_record.read_verdict(self.dir, crumb.pid)
        if verdict is not None and verdict["nodeid"] == nodeid:
            return {"cause": verdict["cause"], "stack": verdict["stack"]}
        stack = crash_record.read_fault(self.dir, crumb.pid)
        fatal = crash_record.fault_cause(stack)
        cause = f"its xdist worker died: {fatal}" if fatal else "its xdist worker died (os._exit, or killed)"
        return {"cause": cause + crash_record.where_it_died(crumb), "stack": stack}

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        self._journal({"ending": True})  # a death from here on (a conftest's session end) is in no test
        # A test an earlier round lost with its process failed this run, unless a rerun passed.
        lost = self.record.carried_failed()
        if lost and session.exitstatus in (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED):
            session.exitstatus = pytest.ExitCode.TESTS_FAILED
