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
short, a stray child) get SIGTERM, then SIGKILL; each is named on one line.
"""

from __future__ import annotations

import os
import re
import signal
import sys
import time
from collections.abc import Generator
from dataclasses import dataclass, field
from types import FrameType
from typing import Any

import pytest

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

    def handler(self, signum: int, frame: FrameType | None) -> None:
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
            signal.signal(signum, previous)


def _cancel_rays_shutdown_deadline(signum: int) -> None:
    """A Ray driver answers SIGTERM by arming alarm(3), a hard deadline for its own shutdown,
    before passing the signal on (seen with strace). The run's clean-up (teardown, results,
    leftover processes) can take longer on a busy machine, and SIGALRM's default action would
    then end pytest with no exit status of ours: cancel that deadline, keep anyone else's."""
    if signum != signal.SIGTERM or "ray" not in sys.modules or not hasattr(signal, "alarm"):
        return
    remaining = signal.alarm(0)
    if remaining > 3:
        signal.alarm(remaining)  # not Ray's: someone else's alarm, armed earlier


def _say(line: str) -> None:
    print(f"\n{line}", file=sys.stderr, flush=True)


_GUARD: _Guard | None = None
_OWNER = pytest.StashKey[bool]()


def _in_main_thread() -> bool:
    import threading

    return threading.current_thread() is threading.main_thread()


def pytest_configure(config: pytest.Config) -> None:
    global _GUARD
    if _GUARD is not None or not _in_main_thread():
        return  # an inner pytester run: the outer session owns signals and the sweep
    _GUARD = _Guard()
    _GUARD.install()
    config.stash[_OWNER] = True


def _reassert() -> None:
    if _GUARD is not None:
        _GUARD.assert_installed()


@pytest.hookimpl(wrapper=True)
def pytest_fixture_setup() -> Generator[None, Any, Any]:
    try:
        return (yield)
    finally:
        _reassert()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, Any, Any]:
    _reassert()
    error = call.excinfo.value if call.excinfo is not None else None
    # Ray's SIGTERM handler (installed by a ray.init() inside the test body) exits the test with
    # SystemExit(SIGTERM): that is our stop signal, not a test failure.
    if isinstance(error, SystemExit) and error.code == signal.SIGTERM:
        if _GUARD is not None and _GUARD.policy.on_signal(signal.SIGTERM, time.monotonic()) == INTERRUPT:
            _cancel_rays_shutdown_deadline(signal.SIGTERM)
            _say("testharness: SIGTERM received: stopping the run like Ctrl-C (results are still written)")
            raise Interrupted("SIGTERM")
    return (yield)


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config: pytest.Config) -> None:
    global _GUARD
    if not config.stash.get(_OWNER, False) or _GUARD is None:
        return
    _GUARD.uninstall()
    _GUARD = None
    stopped = stop_leftover_children(SWEEP_GRACE_S)
    if stopped:
        _say(f"testharness: stopped {len(stopped)} process(es) the run left behind: {', '.join(stopped)}")


def ray_session_marker(pid: int) -> re.Pattern[str]:
    """Matches the session name Ray gives a cluster started by process `pid`
    (`session_2026-12-02_01-34-23_936458_<pid>`), which every process of it carries."""
    return re.compile(rf"session_\d{{4}}-\d\d-\d\d_\d\d-\d\d-\d\d_\d+_{pid}(?!\d)")


def _left_behind() -> list[Any]:
    """Live descendants of this process, and processes of a Ray cluster it started that are no
    longer its descendants: a worker still starting when its raylet stops is orphaned and
    lingers until its own start-up gives up (tens of seconds on a busy machine)."""
    import psutil

    me = psutil.Process()
    found = {p.pid: p for p in me.children(recursive=True)}
    marker = ray_session_marker(me.pid)
    born = me.create_time()
    for proc in psutil.process_iter(["cmdline", "create_time"]):
        if proc.pid in found or proc.pid == me.pid or (proc.info["create_time"] or 0) < born:
            continue
        if any(marker.search(part) for part in proc.info["cmdline"] or []):
            found[proc.pid] = proc
    return list(found.values())


def stop_leftover_children(grace_s: float) -> list[str]:
    """Terminate every live descendant of this process (and its Ray cluster's orphans);
    SIGKILL what outlives `grace_s`."""
    import psutil

    try:
        children = _left_behind()
    except psutil.Error:
        return []
    names: list[str] = []
    for child in children:
        try:
            names.append(f"{child.name()} (pid {child.pid})")
            child.terminate()
        except psutil.Error:
            continue
    if children:
        _gone, alive = psutil.wait_procs(children, timeout=grace_s)
        for proc in alive:
            try:
                proc.kill()
            except psutil.Error:
                pass
    return names
