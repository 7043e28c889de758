"""SIGTERM and SIGHUP end a pytest run the way Ctrl-C does; no process of the run outlives it.

Without this, SIGTERM (sent by `timeout`, a CI cancel, `docker stop`) kills pytest at once:
no teardown, no results file, Ray's processes left running. Here the first SIGINT, SIGTERM
or SIGHUP raises `Interrupted` (a KeyboardInterrupt) in the main thread, so pytest tears
down, writes its results and exits 2. The same signal delivered twice at once (the terminal
sends Ctrl-C to the whole process group, and a parent such as run_unit.sh forwards it) counts
once; a later one during clean-up is answered with a note, and a third stops at once.

`ray.init()` installs its own SIGTERM handler (`sys.exit`), so ours is re-asserted after
every fixture set-up and test phase; a test that starts Ray in its own body and is stopped by
that handler is turned into the same interruption.

At the end of the run (pytest_unconfigure of the outermost session in this process) the
processes this pytest started and that are still alive (a Ray cluster whose shutdown was cut
short, a stray child) get SIGTERM, then SIGKILL; each is named on one line
(testharness.process_sweep, which run_unit's supervisor uses too).

A child that a test forks (os.fork, multiprocessing's fork) is not the run: it starts with the
signal handlers the process had before ours (os.register_at_fork), so that SIGTERM ends it
instead of making it finish pytest's session, and it never sweeps. Should it come back into
pytest (it returned or raised instead of calling os._exit, or a KeyboardInterrupt reached it),
it ends there, before any teardown or session end of the run's: no results, no signals.

All of this is for a project with `[tool.testharness]`: where the harness is merely installed,
signals and the run's processes are left to the project.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from collections.abc import Generator
from dataclasses import dataclass, field
from types import FrameType
from typing import Any

import pytest

from testharness import process_sweep, real_ray
from testharness.contract import get_extra, put_extra, settings_of

HANDLED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
SAME_EVENT_S = 1.0  # a repeat within this window is one event delivered twice
SWEEP_GRACE_S = 3.0  # leftover processes get SIGTERM, then SIGKILL after this


class Interrupted(KeyboardInterrupt):
    """The run was asked to stop by a signal; pytest handles it like Ctrl-C (exit 2)."""


# --- the decision (pure) -----------------------------------------------------------------

INTERRUPT, IGNORE, NOTE, FORCE = "interrupt", "ignore", "note", "force"


@dataclass
class SignalPolicy:
    """What the n-th stop signal of a run does."""

    first: tuple[int, float] | None = None  # (signal, time) of the one that interrupted
    last_time: float = 0.0
    insisted: int = 0

    def on_signal(self, signum: int, now: float) -> str:
        if self.first is None:
            self.first, self.last_time = (signum, now), now
            return INTERRUPT
        repeat = now - self.last_time < SAME_EVENT_S
        self.last_time = now
        if repeat:
            return IGNORE
        self.insisted += 1
        return NOTE if self.insisted == 1 else FORCE


def signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


# --- the pytest adapter ------------------------------------------------------------------


@dataclass
class _Guard:
    """Installed by the outermost pytest session of a process (pytester inner runs reuse it)."""

    policy: SignalPolicy = field(default_factory=SignalPolicy)
    previous: dict[int, Any] = field(default_factory=dict)
    pid: int = field(default_factory=os.getpid)

    def handler(self, signum: int, frame: FrameType | None) -> None:
        if os.getpid() != self.pid:  # a child forked where os.register_at_fork does not run (C's fork)
            self.uninstall()
            os.kill(os.getpid(), signum)  # what the signal would have done without the harness
            return
        action = self.policy.on_signal(signum, time.monotonic())
        name = signal_name(signum)
        if action == INTERRUPT:
            _cancel_rays_shutdown_deadline(signum)
            # Python's own Ctrl-C message is pytest's "KeyboardInterrupt" line; name the others.
            if signum != signal.SIGINT:
                _say(f"testharness: {name} received: stopping the run like Ctrl-C (results are still written)")
            raise Interrupted(name)
        if action == NOTE:
            _say(f"testharness: {name} received: still stopping (tearing down); send it again to stop at once")
        elif action == FORCE:
            _say(f"testharness: {name} received again: stopping at once, without results")
            os._exit(2)

    def assert_installed(self) -> None:
        """Put our handler back where something (ray.init) replaced it."""
        for signum in HANDLED:
            current = signal.getsignal(signum)
            if current is not self.handler and current != signal.SIG_IGN:
                signal.signal(signum, self.handler)

    def install(self) -> None:
        for signum in HANDLED:
            previous = signal.getsignal(signum)
            if previous == signal.SIG_IGN:
                continue  # nohup, or a background job without job control: honour it
            self.previous[signum] = previous
            signal.signal(signum, self.handler)

    def uninstall(self) -> None:
        for signum, previous in self.previous.items():
            try:  # None: a handler set outside Python, which Python cannot put back
                signal.signal(signum, signal.SIG_DFL if previous is None else previous)
            except (ValueError, OSError, TypeError):
                pass


def _cancel_rays_shutdown_deadline(signum: int) -> None:
    """A Ray driver answers SIGTERM by arming alarm(3), a hard deadline for its own shutdown,
    before passing the signal on (seen with strace). The run's clean-up (teardown, results,
    leftover processes) can take longer on a busy machine, and SIGALRM's default action would
    then end pytest with no exit status of ours: cancel that deadline, keep anyone else's."""
    if signum != signal.SIGTERM or real_ray.imported() is None or not hasattr(signal, "alarm"):
        return
    remaining = signal.alarm(0)
    if remaining > 3:
        signal.alarm(remaining)  # not Ray's: someone else's alarm, armed earlier


def _say(line: str) -> None:
    print(f"\n{line}", file=sys.stderr, flush=True)


_GUARD: _Guard | None = None
_OWNER = pytest.StashKey[bool]()
_OWNER_PID: int | None = None  # the process of the run (set while a guard is installed)
_RUNNING = "a test of this run"  # the test whose protocol runs now, named when a forked child ends


def _in_forked_child() -> bool:
    """Whether this process is a child that a test (or fixture) of the run forked."""
    return _OWNER_PID is not None and os.getpid() != _OWNER_PID


def _disarm_in_forked_child() -> None:
    """os.register_at_fork: the child gets the handlers the process had before the run's."""
    global _GUARD
    if _GUARD is not None and _in_forked_child():
        guard, _GUARD = _GUARD, None
        guard.uninstall()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_disarm_in_forked_child)


def _end_forked_child(where: str, code: int) -> None:
    """A forked child came back into pytest: it ends here, before it can run the rest of the
    session (teardown, other tests, the results, the sweep) as if it were the run."""
    line = (
        f"\ntestharness: process {os.getpid()}, forked by {where}, came back into pytest; it ends here "
        f"(exit {code}) without running the rest of the session (end a forked child with os._exit)\n"
    )
    try:
        os.write(2, line.encode())
    finally:
        os._exit(code)


def _child_exit_code(error: BaseException | None) -> int:
    if isinstance(error, SystemExit):
        code = error.code
        return code if isinstance(code, int) else (0 if code is None else 1)
    return 0 if error is None else 1


def _in_main_thread() -> bool:
    import threading

    return threading.current_thread() is threading.main_thread()


def pytest_configure(config: pytest.Config) -> None:
    global _GUARD, _OWNER_PID
    if _GUARD is not None or not _in_main_thread():
        return  # an inner pytester run: the outer session owns signals and the sweep
    if not settings_of(config).configured:
        return  # merely installed (no [tool.testharness]): the project's signals, its processes
    _GUARD = _Guard()
    _GUARD.install()
    _OWNER_PID = _GUARD.pid
    config.stash[_OWNER] = True


def reassert_signal_handlers() -> None:
    """Put the harness's stop-signal handlers back if another handler replaced them (xdist's
    controller installs its own as it starts the workers, ray.init its SIGTERM handler)."""
    if _GUARD is not None:
        _GUARD.assert_installed()


def pytest_testharness_reassert_signal_handlers(config: pytest.Config) -> None:
    reassert_signal_handlers()  # testharness.parallel, after the Ray cluster's start


@pytest.hookimpl(wrapper=True)
def pytest_fixture_setup() -> Generator[None, Any, Any]:
    try:
        return (yield)
    finally:
        reassert_signal_handlers()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, Any, Any]:
    reassert_signal_handlers()
    error = call.excinfo.value if call.excinfo is not None else None
    # Ray's SIGTERM handler (installed by a ray.init() inside the test body) exits the test with
    # SystemExit(SIGTERM): that is our stop signal, not a test failure.
    if isinstance(error, SystemExit) and error.code == signal.SIGTERM:
        if _GUARD is not None and _GUARD.policy.on_signal(signal.SIGTERM, time.monotonic()) == INTERRUPT:
            _cancel_rays_shutdown_deadline(signal.SIGTERM)
            _say("testharness: SIGTERM received: stopping the run like Ctrl-C (results are still written)")
            raise Interrupted("SIGTERM")
    report = yield
    if _in_forked_child():  # ended in pytest_runtest_logreport, with the status it asked for
        put_extra(report, "testharness_child_exit", _child_exit_code(error))
    return report


def pytest_runtest_logstart(nodeid: str) -> None:
    global _RUNNING
    _RUNNING = nodeid


def _child_exit(report: pytest.TestReport) -> int:
    code = get_extra(report, "testharness_child_exit")
    return code if isinstance(code, int) else (1 if report.failed else 0)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    # The first hook after a test phase that a forked child reaches, and before the teardown;
    # pytest-forked's child makes its report without logging it, and is left to do so.
    if _in_forked_child():
        _end_forked_child(report.nodeid, _child_exit(report))


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_sessionfinish(session: pytest.Session) -> Generator[None, None, None]:
    # The outermost wrapper: a forked child that a KeyboardInterrupt or pytest.exit carried
    # straight to the session's end stops before any plugin's session end runs.
    if _in_forked_child():
        _end_forked_child(_RUNNING, int(session.exitstatus))
    return (yield)


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config: pytest.Config) -> None:
    global _GUARD, _OWNER_PID
    if not config.stash.get(_OWNER, False) or _GUARD is None or os.getpid() != _GUARD.pid:
        return
    _GUARD.uninstall()
    _GUARD = None
    _OWNER_PID = None
    stopped = process_sweep.end(process_sweep.left_behind(), SWEEP_GRACE_S)
    if stopped:
        _say(f"testharness: stopped {len(stopped)} process(es) the run left behind: {', '.join(stopped)}")
