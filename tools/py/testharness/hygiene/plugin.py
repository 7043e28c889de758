"""pytest adapter of test hygiene: the leak check around every test and the hang watchdog.

Both are the harness's, in a project with `[tool.testharness]` (where it is merely installed,
neither runs unless `--fail-on-leak` asks for them, and pytest-timeout keeps its own timer).

Leak check (on by default; `[tool.testharness.hygiene] leak_check = false` or
`--no-leak-check` turns it off): a snapshot (probe.snapshot) before the test's setup and
after its teardown; what the test or its function-scoped fixtures created and did not end
is a leak. Fixtures of a broader scope are snapshotted around their own setup: what they
create is theirs, not the test's, and it is checked when their finalizer has run (at the
teardown of the last test of their scope, and charged there, as "[module fixture 'x']").
GPU memory: per GPU, the level after teardown against the level before setup plus what a
broader fixture set up in between took, with `gpu_threshold_mib` of slack; not under xdist
with several workers (their tests share the GPUs: a reading cannot be charged to one test),
nor in a pytest that a test of such a run started (it shares them too).

Leaks ride on the teardown report (`testharness_leaks`, which xdist serialises), so the
tracker writes them under the test in unit_results.json and the process that prints the
summary (the xdist controller, else this one) prints one block at the end.

Hang watchdog: a timer per test (setup + call + teardown); `@pytest.mark.timeout(N)` (the
pytest-timeout marker), else pytest-timeout's --timeout / ini `timeout`, else
`[tool.testharness.hygiene] timeout`. pytest-timeout's own timer is switched off through its
hooks: it would only report the test process's `ray.get`. When the timer fires (in its own
thread: the main thread may be inside ray.get, which swallows a signal handler's exception),
hang.diagnose dumps every stack, the test's actors and processes are killed (which also ends
the ray.get that waited on them) and the phase's report becomes a failure whose one line
names the stuck actor method, file and line; the stacks go to the report and the results.
"""

from __future__ import annotations

import time
from collections.abc import Generator
from dataclasses import dataclass, field
from typing import Any

import pytest

from testharness.contract import get_extra, gpus_shared, put_extra, register_for, settings_of
from testharness.hygiene import core, probe
from testharness.hygiene.watchdog import HANG as _HANG
from testharness.hygiene.watchdog import Watchdog as _Watchdog
from testharness.settings import Hygiene

_LEAKS = pytest.StashKey[list[core.Leak]]()
_HANG_REPORTED = pytest.StashKey[bool]()
POLL_S = 0.1


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("testharness", "test harness (results, tracker)")
    group.addoption(
        "--fail-on-leak",
        action="store_true",
        default=None,
        help="a test that leaves Ray actors, placement groups, processes or GPU memory behind "
        "errors in teardown ([tool.testharness.hygiene] fail_on_leak)",
    )
    group.addoption(
        "--no-leak-check",
        action="store_true",
        default=False,
        help="skip the leak check after every test ([tool.testharness.hygiene] leak_check)",
    )


def pytest_configure(config: pytest.Config) -> None:
    loaded = settings_of(config)
    if not loaded.configured and not config.getoption("fail_on_leak", None):
        return  # merely installed (no [tool.testharness]): no check, no watchdog, pytest-timeout's own
    settings = loaded.hygiene
    if not config.pluginmanager.hasplugin("timeout"):
        config.addinivalue_line("markers", "timeout(seconds): this test's timeout (testharness.hygiene)")
    register_for(config, _Hygiene(config, settings), "testharness-hygiene")


@dataclass
class _Owner:
    label: str
    owned: core.Snapshot
    gpu_before: dict[str, float]


@dataclass(eq=False)  # hashable: pluggy keys plugins by identity
class _Hygiene:
    config: pytest.Config
    settings: Hygiene
    check: bool = True
    fail_on_leak: bool = False
    gpus: probe.Gpus | None = None
    before: core.Snapshot = field(default_factory=core.Snapshot)
    owners: dict[int, _Owner] = field(default_factory=dict)
    grown: dict[str, float] = field(default_factory=dict)  # GPU memory taken by broad fixtures this test
    fixture_leaks: list[core.Leak] = field(default_factory=list)
    fixture_finalized: bool = False
    leaks_by_test: dict[str, list[core.Leak]] = field(default_factory=dict)
    current: pytest.Item | None = None
    watchdog: _Watchdog | None = None

    def __post_init__(self) -> None:
        opt = self.config.getoption
        self.check = self.settings.leak_check and not opt("no_leak_check", False)
        flag = opt("fail_on_leak", None)
        self.fail_on_leak = self.settings.fail_on_leak if flag is None else bool(flag)
        self.gpus = probe.Gpus() if self.check and not gpus_shared() else None

    # --- the leak check ----------------------------------------------------------------

    def _snapshot(self, gpus: bool = True) -> core.Snapshot:
        return probe.snapshot(self.gpus if gpus else None)

    def _live_owned(self) -> core.Snapshot:
        actors: dict[str, core.Actor] = {}
        groups: dict[str, core.Group] = {}
        procs: dict[tuple[int, float], core.Proc] = {}
        for owner in self.owners.values():
            actors.update(owner.owned.actors)
            groups.update(owner.owned.groups)
            procs.update(owner.owned.procs)
        return core.Snapshot(actors=actors, groups=groups, procs=procs)

    def _settled(self, find: Any) -> tuple[list[core.Leak], core.Snapshot]:
        """`find(snapshot)`'s leaks, read again for up to settle_s while there are some:
        ray.kill, a placement group's removal and a process's exit take a moment."""
        snap = self._snapshot()
        leaks = find(snap)
        deadline = time.monotonic() + self.settings.settle_s
        while leaks and time.monotonic() < deadline:
            time.sleep(POLL_S)
            snap = self._snapshot()
            leaks = find(snap)
        return leaks, snap

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_runtest_setup(self, item: pytest.Item) -> Generator[None, None, None]:
        self.current = item
        if self.check:
            self.before = self._snapshot()
            self.grown, self.fixture_leaks, self.fixture_finalized = {}, [], False
        return (yield)

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_fixture_setup(self, fixturedef: Any, request: pytest.FixtureRequest) -> Generator[None, Any, Any]:
        if fixturedef.scope == "function":
            return (yield)
        # A broader fixture's setup (starting Ray, loading a model) is not the test's time:
        # the test's clock stops, and the fixture gets the default timeout of its own.
        watchdog = self.watchdog
        if watchdog is not None:
            watchdog.pause(self.settings.timeout, f"{fixturedef.scope} fixture {fixturedef.argname!r} (setup)")
        try:
            if not self.check:
                return (yield)
            return (yield from self._owned_setup(fixturedef))
        finally:
            if watchdog is not None:
                watchdog.resume()

    def _owned_setup(self, fixturedef: Any) -> Generator[None, Any, Any]:
        before = self._snapshot()
        try:
            return (yield)
        finally:
            after = self._snapshot()
            label = f"{fixturedef.scope} fixture {fixturedef.argname!r}"
            self.owners[id(fixturedef)] = _Owner(label, core.created_between(before, after), dict(before.gpus))
            for gpu, grew in core.gpu_delta(before.gpus, after.gpus).items():
                self.grown[gpu] = self.grown.get(gpu, 0.0) + grew

    def pytest_fixture_post_finalizer(self, fixturedef: Any, request: pytest.FixtureRequest) -> None:
        owner = self.owners.pop(id(fixturedef), None)
        if owner is None or not self.check:
            return
        self.fixture_finalized = True
        threshold = self.settings.gpu_threshold_mib

        def find(snap: core.Snapshot) -> list[core.Leak]:
            found = core.still_held(owner.owned, snap, owner.label)
            return found + core.gpu_growth(owner.gpu_before, snap.gpus, threshold, owner.label)

        self.fixture_leaks.extend(self._settled(find)[0])

    def _test_leaks(self, item: pytest.Item) -> list[core.Leak]:
        owned = self._live_owned()
        expected = core.add_gpus(self.before.gpus, self.grown)
        threshold = self.settings.gpu_threshold_mib
        check_gpu = not self.fixture_finalized  # then the fixture's own check compares GPU memory

        def find(snap: core.Snapshot) -> list[core.Leak]:
            found = core.leaks_between(self.before, snap, owned)
            return found + (core.gpu_growth(expected, snap.gpus, threshold) if check_gpu else [])

        leaks, snap = self._settled(find)
        if item.stash.get(_HANG, None) is not None:  # nothing of a hung test may survive the run
            from testharness.hygiene import hang  # deferred: only a hung test needs it (~20 ms of every start)

            left = core.created_between(self.before, snap).without(owned)
            hang.end_actors(list(left.actors.values()))
            hang.end_processes(list(left.procs.values()))
        return leaks + self.fixture_leaks

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_runtest_teardown(self, item: pytest.Item, nextitem: pytest.Item | None) -> Generator[None, None, None]:
        if not self.check:
            return (yield)
        try:
            result = yield
        except (KeyboardInterrupt, SystemExit):
            raise  # the run is stopping: no check (it could wait settle_s)
        except BaseException:
            item.stash[_LEAKS] = self._test_leaks(item)
            raise
        leaks = self._test_leaks(item)
        item.stash[_LEAKS] = leaks
        if leaks and self.fail_on_leak:
            pytest.fail(core.failure_line(leaks), pytrace=False)
        return result

    # --- the hang watchdog ---------------------------------------------------------------

    def _timeout(self, item: pytest.Item) -> float:
        marker = item.get_closest_marker("timeout")
        value: Any = None
        if marker is not None:
            value = marker.args[0] if marker.args else marker.kwargs.get("timeout")
        if value is None:
            value = getattr(item.config, "_env_timeout", None)  # pytest-timeout's --timeout / ini
        if value is None:
            value = self.settings.timeout
        try:
            return max(0.0, float(value))
        except (TypeError, ValueError):
            return 0.0

    @pytest.hookimpl(wrapper=True, trylast=True)  # innermost: waits of outer wrappers not counted
    def pytest_runtest_protocol(self, item: pytest.Item, nextitem: pytest.Item | None) -> Generator[None, Any, Any]:
        timeout = self._timeout(item)
        debugging = self.config.getoption("usepdb", False) or self.config.getoption("trace", False)
        watchdog = _Watchdog(self, item, timeout) if timeout > 0 and not debugging else None
        self.watchdog = watchdog
        if watchdog is not None:
            watchdog.start()
        try:
            return (yield)
        finally:
            if watchdog is not None:
                watchdog.cancel()
            self.current, self.watchdog = None, None

    @pytest.hookimpl(optionalhook=True, tryfirst=True)
    def pytest_timeout_set_timer(self, item: pytest.Item, settings: Any) -> bool:
        return True  # the watchdog above times the test; pytest-timeout's timer stays off

    @pytest.hookimpl(optionalhook=True, tryfirst=True)
    def pytest_timeout_cancel_timer(self, item: pytest.Item) -> bool:
        return True

    # --- reports -----------------------------------------------------------------------

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, Any, Any]:
        diagnosis = item.stash.get(_HANG, None)
        original, rewrite = None, False
        if diagnosis is not None and not item.stash.get(_HANG_REPORTED, False):
            item.stash[_HANG_REPORTED] = rewrite = True
            original = call.excinfo
            try:
                pytest.fail(diagnosis.reason, pytrace=False)
            except pytest.fail.Exception as failure:
                object.__setattr__(call, "excinfo", pytest.ExceptionInfo.from_exception(failure))
        report = yield
        if rewrite and diagnosis is not None:
            put_extra(report, "testharness_hang", diagnosis.record)
            report.sections.append(("hang diagnosis (stacks)", diagnosis.text))
            if original is not None:
                report.sections.append(("error after the timeout", f"{original.typename}: {original.value}"))
        if call.when == "teardown":
            leaks = item.stash.get(_LEAKS, [])
            if leaks:
                put_extra(report, "testharness_leaks", [leak.as_json() for leak in leaks])
        return report

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        for entry in get_extra(report, "testharness_leaks") or []:
            leak = core.Leak.from_json(entry)
            if leak is not None:
                self.leaks_by_test.setdefault(report.nodeid, []).append(leak)

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        lines = core.summary_lines(self.leaks_by_test)
        if not lines:
            return
        n = len([t for t, v in self.leaks_by_test.items() if v])
        terminalreporter.section(f"leaks: {n} test(s) left resources behind", sep="=", yellow=True)
        for line in lines:
            terminalreporter.write_line(line)
        if not self.fail_on_leak:
            terminalreporter.write_line("(--fail-on-leak, or fail_on_leak = true in [tool.testharness.hygiene], "
                                        "makes them errors)")  # fmt: skip

    def pytest_unconfigure(self, config: pytest.Config) -> None:
        if self.gpus is not None:
            self.gpus.close()
