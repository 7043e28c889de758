"""The hang watchdog of one test (testharness.hygiene.plugin arms it around the test's phases):
a timer that, when it fires, diagnoses the hang (hang.py), ends the hung actors and processes
and fails the phase. Its deadline goes to run_unit's supervisor through the harness's hook
`pytest_testharness_test_deadline`, so that a timer that cannot run (a C call holding the
GIL, signals blocked) is not the end of the story."""

from __future__ import annotations

import signal
import sys
import threading
import time
from typing import TYPE_CHECKING, Any, Protocol

import pytest

if TYPE_CHECKING:
    from testharness.hygiene import core, hang

DIAGNOSIS_WAIT_S = 120.0  # the test's end waits this long for a fired watchdog's diagnosis
DIAGNOSIS_BUDGET_S = DIAGNOSIS_WAIT_S + 30.0  # the supervisor's deadline once the watchdog runs

HANG: pytest.StashKey[hang.Diagnosis] = pytest.StashKey()


class _KnowsBefore(Protocol):
    before: core.Snapshot  # what ran before the test (the diagnosis leaves it alone)


class Watchdog:
    """One test's timer: diagnose, end the hung processes, fail the phase."""

    def __init__(self, plugin: _KnowsBefore, item: pytest.Item, timeout: float) -> None:
        self.plugin, self.item, self.timeout = plugin, item, timeout
        self.main = threading.get_ident()
        self.remaining = timeout  # of the test's own time
        self.running: tuple[float, str] = (timeout, "the test")  # what the armed timer times
        self.armed_at = 0.0
        self.paused = 0  # depth of broader fixtures being set up
        self.timer: threading.Timer | None = None
        self.lock = threading.Lock()
        self.fired = threading.Event()
        self.done = threading.Event()
        self.previous: Any = None
        self.closed = False  # cancelled: no timer may be armed or fire any more
        if threading.current_thread() is threading.main_thread() and hasattr(signal, "SIGALRM"):
            self.previous = signal.signal(signal.SIGALRM, self._interrupt)

    def _arm(self, seconds: float, what: str) -> None:
        if self.timer is not None:
            self.timer.cancel()
        if self.closed:
            return
        self.running, self.armed_at = (seconds, what), time.monotonic()
        self.timer = threading.Timer(max(seconds, 0.001), self._fire)
        self.timer.daemon = True
        self.timer.name = f"testharness-hang-watchdog {self.item.nodeid}"
        self.timer.start()
        self._deadline(seconds)  # run_unit's supervisor steps in if this timer cannot run

    def _deadline(self, seconds: float | None) -> None:
        config = self.item.config
        config.hook.pytest_testharness_test_deadline(config=config, seconds=seconds)

    def start(self) -> None:
        with self.lock:
            self._arm(self.timeout, "the test")

    def pause(self, fixture_timeout: float, what: str) -> None:
        with self.lock:
            self.paused += 1
            if self.paused > 1 or self.fired.is_set() or self.timer is None:
                return
            self.timer.cancel()
            self.remaining -= time.monotonic() - self.armed_at
            if fixture_timeout > 0:
                self._arm(fixture_timeout, what)
            else:
                self.timer = None
                self._deadline(None)

    def resume(self) -> None:
        with self.lock:
            self.paused -= 1
            if self.paused == 0 and not self.fired.is_set():
                self._arm(self.remaining, "the test")

    def cancel(self) -> None:
        with self.lock:
            self.closed = True  # a timer already waiting on the lock in _fire gives up
            if self.timer is not None:
                self.timer.cancel()
        if self.fired.is_set():
            self.done.wait(DIAGNOSIS_WAIT_S)  # the diagnosis ends the processes before the next test starts
        if self.previous is not None:
            signal.signal(signal.SIGALRM, self.previous)

    def _interrupt(self, signum: int, frame: Any) -> None:
        diagnosis = self.item.stash.get(HANG, None)
        if diagnosis is not None and not self.done.is_set():
            pytest.fail(diagnosis.reason, pytrace=False)

    def _fire(self) -> None:
        with self.lock:
            if self.closed or threading.current_thread() is not self.timer:
                return  # cancelled (SIGALRM's default handler is back: it would end the process), or re-armed
            self.fired.set()
        self._deadline(DIAGNOSIS_BUDGET_S)  # it runs: give it time to diagnose and end the test
        try:
            from testharness.hygiene import hang  # deferred: only a test that hangs needs the diagnosis

            root = str(self.item.config.rootpath)
            test_file = self.item.nodeid.split("::", 1)[0]
            seconds, what = self.running
            if what == "the test":
                seconds = self.timeout  # the test's whole budget, however it was paused
            diagnosis, actors, procs = hang.diagnose(seconds, self.plugin.before, test_file, root, self.main, what)
            self.item.stash[HANG] = diagnosis
            print(f"\n[testharness] {self.item.nodeid}: {diagnosis.text}", file=sys.__stderr__, flush=True)
            if self.previous is not None and not diagnosis.main_in_ray:
                # The test process waits in Python code: fail it there. Inside Ray (ray.get,
                # ray.wait) the handler's exception would surface as a SystemError deep in
                # Ray; ending the awaited actors below ends that wait cleanly instead.
                signal.pthread_kill(self.main, signal.SIGALRM)
                time.sleep(0.5)
            hang.cancel_tasks()
            hang.end_actors(actors)
            hang.end_processes(procs)
            left = hang.await_ended(diagnosis.ending)
            left += hang.end_task_retries(diagnosis.task_workers)
            if left:
                print(f"[testharness] the hung processes {left} outlived a SIGKILL", file=sys.__stderr__, flush=True)
        except Exception as exc:  # noqa: BLE001  the watchdog must never take the run down
            print(f"[testharness] hang diagnosis failed: {exc!r}", file=sys.__stderr__, flush=True)
        finally:
            self.done.set()
