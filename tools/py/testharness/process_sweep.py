"""What a run leaves alive is found, ended and named: no process outlives the run.

Two sweeps use it. The plugin's, as pytest's outermost session ends (testharness.interrupts):
the live descendants of pytest and the processes of a Ray cluster it started. run_unit's, after
each pytest it starts (testharness.pytest_round): on Linux the supervisor is a child subreaper
(`become_subreaper`, prctl PR_SET_CHILD_SUBREAPER), so every process of the run whose parent
dies (a double fork, a daemon that calls setsid, a test's child left by a crash) is re-parented
to it rather than to init, and its descendants are the run's leftovers whatever they did to
their environment or session; elsewhere it finds them by the round's marker in their
environment and by the Ray cluster's session name, which a process that scrubs its environment
and is not part of that cluster escapes (docs/unit-tests.md says so).

Each process is sent SIGTERM, then SIGKILL after a grace, and reaped where it is a child of
this process; `describe` names it in one line: `sleep (pid 4083) [sleep 300]`.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import time
from collections.abc import Iterable
from typing import Any

PR_SET_CHILD_SUBREAPER, PR_GET_CHILD_SUBREAPER = 36, 37  # linux/prctl.h
COMMAND_CHARS = 120  # of a command line in the line that names a process


def _prctl() -> Any:
    """libc's prctl (Linux), else None."""
    if not sys.platform.startswith("linux"):
        return None
    import ctypes  # deferred: only run_unit's supervisor asks (~2 ms of every pytest's start)

    try:
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


def become_subreaper() -> bool:
    """Make this process the child subreaper of its descendants (Linux): an orphan among them
    is re-parented to it, not to init. False where the call is not available."""
    prctl = _prctl()
    return prctl is not None and prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0


def is_subreaper() -> bool:
    """Whether this process is a child subreaper (False where the OS has no such thing)."""
    prctl = _prctl()
    if prctl is None:
        return False
    import ctypes

    flag = ctypes.c_int(0)
    return prctl(PR_GET_CHILD_SUBREAPER, ctypes.byref(flag), 0, 0, 0) == 0 and flag.value == 1


def descendants(skip: Iterable[int] = ()) -> list[Any]:
    """This process's live descendants (psutil processes), but `skip` and theirs."""
    import psutil

    skipped = set(skip)
    found = []
    with contextlib.suppress(psutil.Error):
        for proc in psutil.Process().children(recursive=True):
            if proc.pid not in skipped:
                found.append(proc)
    return found


def marked(name: str, value: str) -> list[Any]:
    """Live processes whose environment has `name`=`value` (this process left out)."""
    import psutil

    found = []
    for proc in psutil.process_iter():
        with contextlib.suppress(psutil.Error):  # gone, a zombie, or another user's
            if proc.pid != os.getpid() and proc.environ().get(name) == value:
                found.append(proc)
    return found


def ray_session_marker(pid: int) -> re.Pattern[str]:
    """Matches the session name Ray gives a cluster started by process `pid`
    (`session_2026-12-02_01-34-23_936458_<pid>`), which every process of it carries."""
    return re.compile(rf"session_\d{{4}}-\d\d-\d\d_\d\d-\d\d-\d\d_\d+_{pid}(?!\d)")


def ray_cluster_processes(pid: int, born: float) -> list[Any]:
    """Live processes of a Ray cluster that process `pid` (started at `born`, epoch seconds)
    started, whoever their parent is now: its own, or init's once it died."""
    import psutil

    marker = ray_session_marker(pid)
    found = []
    for proc in psutil.process_iter(["cmdline", "create_time"]):
        if proc.pid == pid or (proc.info["create_time"] or 0) < born:
            continue
        if any(marker.search(part) for part in proc.info["cmdline"] or []):
            found.append(proc)
    return found


def left_behind() -> list[Any]:
    """Live descendants of this process, and processes of a Ray cluster it started that are no
    longer its descendants: a worker still starting when its raylet stops is orphaned and
    lingers until its own start-up gives up (tens of seconds on a busy machine)."""
    import psutil

    try:
        me = psutil.Process()
        found = {p.pid: p for p in me.children(recursive=True)}
        found.update((p.pid, p) for p in ray_cluster_processes(me.pid, me.create_time()) if p.pid not in found)
    except psutil.Error:
        return []
    return list(found.values())


def describe(proc: Any) -> str:
    """`name (pid N) [command line]`, the command line clipped."""
    import psutil

    try:
        name = proc.name()
    except psutil.Error:
        name = "?"
    try:
        command = " ".join(proc.cmdline())
    except psutil.Error:
        command = ""
    if len(command) > COMMAND_CHARS:
        command = command[: COMMAND_CHARS - 3] + "..."
    return f"{name} (pid {proc.pid})" + (f" [{command}]" if command else "")


def reap_children(skip: Iterable[int] = ()) -> None:
    """Collect this process's exited children (zombies), but `skip` (a child someone waits for)."""
    import psutil

    skipped = set(skip)
    with contextlib.suppress(psutil.Error):
        for child in psutil.Process().children():
            if child.pid in skipped:
                continue
            with contextlib.suppress(OSError, psutil.Error):
                if child.status() == psutil.STATUS_ZOMBIE:
                    os.waitpid(child.pid, os.WNOHANG)


def end(procs: Iterable[Any], grace_s: float) -> list[str]:
    """SIGTERM to each live process of `procs`, SIGKILL to those alive after `grace_s`, reaped
    where they are this process's children; the named ones (zombies are only reaped)."""
    import psutil

    unique = {p.pid: p for p in procs if p.pid != os.getpid()}
    names, targets = [], []
    for proc in unique.values():
        with contextlib.suppress(psutil.Error):
            if proc.status() == psutil.STATUS_ZOMBIE:
                continue
            names.append(describe(proc))
            proc.terminate()
            targets.append(proc)
    if targets:
        _gone, alive = psutil.wait_procs(targets, timeout=grace_s)
        for proc in alive:
            with contextlib.suppress(psutil.Error):
                proc.kill()
        psutil.wait_procs(alive, timeout=grace_s)
    _reap_briefly(unique)
    return names


def _reap_briefly(pids: Iterable[int], within_s: float = 1.0) -> None:
    """Reap the ended ones that are (or became, as orphans of each other) our children."""
    left = set(pids)
    deadline = time.monotonic() + within_s
    while left and time.monotonic() < deadline:
        for pid in list(left):
            try:
                done, _status = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:  # not our child (init or another reaper collects it), or reaped
                left.discard(pid)
                continue
            if done:
                left.discard(pid)
        if left:
            time.sleep(0.05)
