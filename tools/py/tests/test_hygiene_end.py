"""The end of a hung test's processes (hang.await_ended), with real processes and signals:
Ray's kill is asynchronous, and the next test must not start beside the hung actor."""

from __future__ import annotations

import subprocess
import sys
import time

from testharness.hygiene import hang, probe
from testharness.hygiene.core import Proc


def _start(*code: str) -> tuple[subprocess.Popen[bytes], Proc]:
    proc = subprocess.Popen([sys.executable, "-c", *code])
    deadline = time.monotonic() + 10
    while not (title := probe._title(proc.pid)).endswith(code[-1]):  # exec'd: titled as diagnosed
        assert time.monotonic() < deadline
        time.sleep(0.01)
    return proc, Proc(proc.pid, 0.0, title)


def test_a_process_that_ends_by_itself_is_waited_for_not_killed() -> None:
    proc, diagnosed = _start("import time; time.sleep(0.5)")
    assert hang.await_ended((diagnosed,), wait_s=10) == []
    assert proc.wait(timeout=5) == 0  # it ended by itself, once the wait had begun


def test_one_that_outlasts_the_wait_is_sigkilled() -> None:
    proc, diagnosed = _start("import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(60)")
    started = time.monotonic()
    assert hang.await_ended((diagnosed,), wait_s=0.3) == []
    assert proc.wait(timeout=5) == -9
    assert time.monotonic() - started < 5


def test_a_process_titled_otherwise_now_is_left_alone() -> None:
    # Ray reused the worker (or the pid is another process's now): not the hung one
    proc, diagnosed = _start("import time; time.sleep(60)")
    try:
        started = time.monotonic()
        assert hang.await_ended((Proc(diagnosed.pid, 0.0, "ray::Rank.all_reduce"),), wait_s=5) == []
        assert time.monotonic() - started < 1
        assert proc.poll() is None
    finally:
        proc.kill()
        proc.wait()


def test_a_killed_actor_that_left_its_method_is_still_the_hung_one() -> None:
    # Ray's kill lets the actor leave its method before its process ends: titled `ray::Rank`
    # now, not `ray::Rank.all_reduce`, it is the same actor (an actor's process serves no other)
    proc = subprocess.Popen(["bash", "-c", "exec -a ray::Rank cat"], stdin=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 10
        while probe._title(proc.pid) != "ray::Rank":
            assert time.monotonic() < deadline
            time.sleep(0.01)
        assert hang.await_ended((Proc(proc.pid, 0.0, "ray::Rank.all_reduce"),), wait_s=0.3) == []
        assert proc.wait(timeout=5) == -9
    finally:
        proc.kill()
        proc.wait()
