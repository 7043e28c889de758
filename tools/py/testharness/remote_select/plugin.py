"""pytest hooks that add remote-affected tests to pytest-testmon's selection.

Inert unless `--testmon` was parsed and testmon registered its `TestmonSelect` plugin.
All decisions live in `engine.py`; this module only translates hooks:

* trylast `pytest_configure` (after testmon decided): build the plan, and remove the test
  files that must be collected from `TestmonSelect.deselected_files`. When planning fails
  (a bug, or state it cannot use), it fails closed: testmon's lists are emptied, so every
  test runs (never testmon alone), and the files it planned from are moved aside.
* `pytest_collection_modifyitems` (tryfirst, so before testmon's trylast one): remove the
  node ids that must run from `TestmonSelect.deselected_tests`. We only ever remove from
  testmon's lists (a union), and `-k`/`-m` still filter afterwards as documented.
* `pytest_runtest_protocol` / `pytest_fixture_setup` wrappers: tell the reach recorder
  (reach.py) which test or fixture owns what is sent to Ray workers meanwhile, and collect
  what traced actors ran when a fixture's set-up ends; the teardown report carries the
  test's reach (`remote_reach`, collected first), so it also crosses xdist.
* `pytest_runtest_logreport`: the outcome and reach of every test that completed.
* `pytest_sessionfinish` (also after -x, failures and Ctrl-C): merge this session's results
  into the map and state files on disk (under a lock: sessions may run side by side).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Generator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from testharness.contract import get_extra, is_xdist_worker, put_extra, settings_of

if TYPE_CHECKING:  # the cores are imported where a --testmon run starts the feature (_start)
    from .engine import RemoteSelector
    from .plan import Plan

PREFIX = "remote-select"


def _testmon_select(config: pytest.Config) -> Any | None:
    """testmon's selection plugin when `--testmon` is in effect (parsed options, not argv)."""
    if not getattr(config.option, "testmon", False):
        return None
    return config.pluginmanager.get_plugin("TestmonSelect")


class RemoteSelectSession:
    """Per-session object registered only when the feature is active."""

    def __init__(self, config: pytest.Config, testmon: Any, selector: RemoteSelector | None, lines: list[str]):
        from .reach import ReachRecorder

        self.config = config
        self.testmon = testmon
        self.selector = selector
        self.lines = lines
        self.plan: Plan | None = None
        self.everything = False  # planning failed: testmon deselects nothing either
        self._phase: dict[str, str] = {}
        self.outcomes: dict[str, str] = {}
        self.reaches: dict[str, list[str] | None] = {}
        self.collected: dict[str, list[str]] = {}
        self.recorder = ReachRecorder(str(config.rootpath))
        # Under xdist only the controller sees every report and may write the files.
        self.writer = not is_xdist_worker(config)

    def start(self) -> None:
        if self.selector is None:
            return
        from testharness.state_files import one_line

        from .plan import describe

        try:
            self.plan = self.selector.plan()
        except Exception as exc:  # noqa: BLE001  whatever failed, it must never hide a test
            why = f"planning failed ({one_line(exc)}){self._set_aside()}"
            self.lines.append(f"{PREFIX}: warning: every test is selected: {why}")
            self.selector = None
            self.everything = True
            self.testmon.deselected_files[:] = []
            return
        self.recorder.install()
        self.lines += [f"{PREFIX}: warning: {m}" for m in self.plan.messages]
        self.lines.append(describe(self.plan))
        files = self.testmon.deselected_files
        keep = [f for f in files if f.replace(os.sep, "/") not in self.plan.affected_files]
        files[:] = keep

    def _set_aside(self) -> str:
        """Move the files planning failed on aside (the writer only): the line's tail."""
        from testharness.state_files import one_line  # deferred: sqlite3 and all, for --testmon runs only

        assert self.selector is not None
        if not self.writer:
            return ""
        try:
            moved = self.selector.set_aside()
        except OSError as exc:
            return f"; its files could not be moved aside ({one_line(exc)})"
        return f"; moved {', '.join(moved)} aside, rebuilt by the next run" if moved else ""

    def pytest_report_header(self, config: pytest.Config) -> list[str]:
        return self.lines

    @pytest.hookimpl(tryfirst=True)
    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        if self.everything:
            self.testmon.deselected_tests[:] = []
            return
        plan = self.plan
        if plan is None:
            return
        from .plan import test_file_of

        collected: dict[str, list[str]] = {}
        for item in items:
            collected.setdefault(test_file_of(item.nodeid), []).append(item.nodeid)
        self.collected = collected
        must = {item.nodeid for item in items if plan.must_run(item.nodeid)}
        if must:
            tests = self.testmon.deselected_tests
            tests[:] = [t for t in tests if t not in must]

    def _owned_by(self, push: Callable[[str], None], key: str, settle: bool = False) -> Generator[None, Any, Any]:
        """Body of a hook wrapper: what runs inside is charged to `key` (a test or a fixture)."""
        push(key)
        try:
            return (yield)
        finally:
            if settle:
                self.recorder.settle()
            self.recorder.pop()

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item) -> Generator[None, Any, Any]:
        return (yield from self._owned_by(self.recorder.push_test, item.nodeid))

    @pytest.hookimpl(wrapper=True)
    def pytest_fixture_setup(self, fixturedef: Any) -> Generator[None, Any, Any]:
        return (yield from self._owned_by(self.recorder.push_fixture, fixturedef.argname, settle=True))

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
        report = yield
        if call.when == "teardown":
            self.recorder.settle()  # what the test's calls ran in traced actors
            put_extra(report, "remote_reach", self.recorder.reach_of(item.nodeid, getattr(item, "fixturenames", ())))
        return report

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        nodeid = report.nodeid
        if report.when == "setup":  # a new attempt (reruns included) starts here
            self._phase[nodeid] = "passed" if report.passed else ("skipped" if report.skipped else "failed")
            return
        status = self._phase.get(nodeid, "failed")
        if report.failed or str(report.outcome) == "rerun":  # pytest-rerunfailures' outcome
            status = "failed"
        elif report.when == "call" and report.skipped and status == "passed":
            status = "skipped"  # pytest.skip() in the body, or an xfail that failed as expected
        self._phase[nodeid] = status
        if report.when == "teardown":
            # Only a completed protocol counts: Ctrl-C mid-test leaves no teardown report.
            self.outcomes[nodeid] = status
            self.reaches[nodeid] = get_extra(report, "remote_reach")

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        self.recorder.uninstall()
        if self.plan is None or self.selector is None or not self.writer:
            return
        from testharness.state_files import one_line

        try:
            lines = self.selector.finish(self.plan, self.outcomes, self.collected, self.reaches)
        except Exception as exc:  # noqa: BLE001  the tests have run: never an INTERNALERROR for this
            lines = [f"could not save its state ({one_line(exc)})"]
        tr = self.config.pluginmanager.get_plugin("terminalreporter")
        if tr is not None:
            for line in lines:
                tr.write_line(f"{PREFIX}: warning: {line}")


_SESSION = pytest.StashKey["RemoteSelectSession | None"]()


def started(config: pytest.Config) -> RemoteSelectSession | None:
    """Remote-aware selection, planned: testmon's lists of files and tests to skip are edited.
    Once per config, for whoever asks first: this module's configure, or the -n planner
    (pytest_testharness_plan_selection), which plans the workers from the selection. Both are
    trylast, and pluggy calls trylast hooks in the order their plugins were registered, which
    `-p` changes: asking, not the order, makes the selection known to the plan. None: not
    selecting."""
    if _SESSION not in config.stash:
        config.stash[_SESSION] = _start(config)
    return config.stash[_SESSION]


def _start(config: pytest.Config) -> RemoteSelectSession | None:
    testmon = _testmon_select(config)  # registered by testmon's configure (not trylast): before ours
    if testmon is None:
        return None
    # deferred: the import graph, the stores and Ray's patches (~50 ms), for --testmon runs only
    from .config import select_config
    from .engine import RemoteSelector
    from .store import StateFiles

    root = Path(str(config.rootpath))
    lines: list[str] = []
    selector: RemoteSelector | None = None
    settings = settings_of(config)  # a malformed table already stopped the run (UsageError)
    cfg = select_config(settings, list(config.getini("python_files") or []))
    if not cfg.source_packages:
        lines.append(
            f"{PREFIX}: warning: [tool.testharness] source_packages is not set in pyproject.toml; "
            "remote-aware selection is off"
        )
    else:
        selector = RemoteSelector(root, cfg, StateFiles.of(settings))
    session = RemoteSelectSession(config, testmon, selector, lines)
    config.pluginmanager.register(session, "testharness-remote-select")
    session.start()
    return session


@pytest.hookimpl(trylast=True)
def pytest_configure(config: pytest.Config) -> None:
    started(config)


def pytest_testharness_plan_selection(config: pytest.Config) -> None:
    started(config)  # the -n planner reads testmon's selection: the files reach keeps are in it


__all__ = ["pytest_configure", "pytest_testharness_plan_selection"]
