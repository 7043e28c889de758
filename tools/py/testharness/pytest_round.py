"""One pytest process of a supervised run (testharness.supervisor): started so that it dies
with the supervisor, stop signals passed on to it, ended from outside when a test is stuck
where its watchdog cannot reach or when the process outlives its session, and what it left
alive swept when it ends.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from testharness import crash_record, process_sweep
from testharness.crash_record import DUMP_SIGNAL, SUPERVISE_DIR_ENV

GRACE_S = 5.0  # past a watchdog's deadline: it would have run by now, were it able to
POLL_S = 0.5
PYSPY_TIMEOUT_S = 30.0
# From pytest's main returning to its process's end only Python's exit is left (atexit
# handlers, Ray's shutdown among them; the wait for threads): seconds, even on a busy machine.
EXIT_GRACE_S = 20.0
# From the session's summary to pytest's main returning: the terminal summary, coverage's
# report, the end-of-run sweep of leftover processes.
SESSION_END_GRACE_S = 120.0
LEFTOVER_GRACE_S = 3.0  # a process the round left behind: SIGTERM, then SIGKILL after this


def say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


@dataclass
class Round:
    """One pytest process and what the supervisor saw of it while it ran."""

    directory: Path
    main_pid: int = 0
    born: float = 0.0  # when pytest started (epoch seconds)
    killed: dict[int, dict[str, str]] = field(default_factory=dict)  # pid -> verdict
    summary_seen: float | None = None  # (monotonic) when its session's summary was first seen
    returned_seen: float | None = None  # ... and the journal's line that its main returned
    ended_late: bool = False  # it outlived its session's end past the deadline: we ended it
    threads: list[str] = field(default_factory=list)  # the non-daemon threads left when its main returned

    def started(self, pid: int) -> None:
        self.main_pid, self.born = pid, time.time() - 1.0  # create_time is rounded: a margin

    def enforce(self) -> None:
        _enforce(self)
        _exit_deadline(self, time.monotonic())


# --- a test stuck where its watchdog cannot reach ------------------------------------------------


def _enforce(rnd: Round) -> None:
    for crumb in crash_record.overdue(crash_record.read_breadcrumbs(rnd.directory), time.time(), GRACE_S):
        if crumb.pid in rnd.killed or not _alive(crumb.pid):
            continue
        seconds = (crumb.deadline or crumb.started) - crumb.started
        say(f"run_unit: {crumb.nodeid} is stuck {GRACE_S:.0f} s past its {seconds:.0f} s timeout and its "
            f"watchdog cannot run (a C call holding the GIL?): dumping its stacks and ending it (pid {crumb.pid})")  # fmt: skip
        stack = dump_stacks(rnd.directory, crumb.pid)
        cause = f"timeout: still running {seconds:.0f} s + {GRACE_S:.0f} s after it started; killed from outside"
        verdict = {"nodeid": crumb.nodeid, "cause": cause, "stack": crash_record.clip(stack)}
        rnd.killed[crumb.pid] = verdict
        crash_record.write_verdict(rnd.directory, crumb.pid, crumb.nodeid, cause, stack)
        _kill_tree(crumb.pid)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def dump_stacks(directory: Path, pid: int) -> str:
    """The stacks of a stuck process: py-spy's (native frames too), else faulthandler's on
    SIGUSR2 (Python frames; it runs even while a C call holds the GIL)."""
    from testharness.hygiene.hang import pyspy_path

    exe = pyspy_path()
    if exe is not None:
        try:
            proc = subprocess.run([exe, "dump", "--native", "--pid", str(pid)], capture_output=True, text=True,
                                  timeout=PYSPY_TIMEOUT_S, check=False)  # fmt: skip
            if proc.returncode == 0 and proc.stdout.strip():
                return "py-spy dump --native:\n" + proc.stdout.strip()
            why = (proc.stderr.strip().splitlines() or ["no output"])[0]
        except (OSError, subprocess.SubprocessError) as exc:
            why = str(exc)
    else:
        why = "py-spy is not installed"
    fault = crash_record.fault_path(directory, pid)
    size = fault.stat().st_size if fault.exists() else 0
    with contextlib.suppress(OSError):
        os.kill(pid, DUMP_SIGNAL)
        time.sleep(1.0)
    try:
        with fault.open(encoding="utf-8", errors="replace") as fh:
            fh.seek(size)
            text = fh.read().strip()
    except OSError:
        text = ""
    return f"({why}; faulthandler's dump:)\n{text}" if text else f"no stacks: {why}"


def _kill_tree(pid: int) -> None:
    import psutil

    try:
        proc = psutil.Process(pid)
        procs = [*proc.children(recursive=True), proc]
    except psutil.Error:
        return
    for p in procs:
        with contextlib.suppress(psutil.Error):
            p.kill()
    psutil.wait_procs(procs, timeout=5)


def _exit_deadline(rnd: Round, now: float) -> None:
    """End a pytest whose session is over but whose process does not end (a thread left
    running that Python's exit waits for, an atexit handler that waits): its stacks first."""
    if rnd.ended_late or rnd.main_pid == 0:
        return
    if rnd.summary_seen is None:
        if not (rnd.directory / "summary.json").exists():
            return
        rnd.summary_seen = now
    if rnd.returned_seen is None:
        journal = crash_record.read_journal(rnd.directory)
        if journal.returned is not None:
            rnd.returned_seen, rnd.threads = now, journal.threads
    limit, since, what = (
        (EXIT_GRACE_S, rnd.returned_seen, "its main returned")
        if rnd.returned_seen is not None
        else (SESSION_END_GRACE_S, rnd.summary_seen, "its session ended")
    )
    if now - since < limit or not _alive(rnd.main_pid):
        return
    rnd.ended_late = True
    keeps = (f"the thread(s) it waits for: {', '.join(rnd.threads)}" if rnd.threads
             else "something keeps it alive (a thread left running, an atexit handler that waits)")  # fmt: skip
    say(f"run_unit: pytest (pid {rnd.main_pid}) has not exited {limit:.0f} s after {what}: {keeps}; its stacks:")
    stack = dump_stacks(rnd.directory, rnd.main_pid)
    say("\n".join("    " + line for line in stack.splitlines()[:80]))
    say("run_unit: ending it; the run's result stands as its record says")
    _kill_tree(rnd.main_pid)


def sweep_round(rnd: Round) -> None:
    """End every process the round's pytest started that is still alive, whoever its parent is
    now: SIGTERM, then SIGKILL; each named (pid and command line) in one line. On Linux the
    supervisor is a child subreaper (process_sweep.become_subreaper): an orphan of the round (a
    double-forked daemon, a child a crash left, with whatever environment) is re-parented to it,
    so its descendants are the round's leftovers; elsewhere (and for a Ray cluster a crash left)
    they are found by the round's marker in their environment and by the cluster's session name.
    Called once pytest has exited, so the run's own Ray cluster was stopped by pytest's own
    shutdown first (after a clean end the plugin's own sweep has usually left nothing)."""
    found = process_sweep.marked(SUPERVISE_DIR_ENV, str(rnd.directory))
    if rnd.main_pid:
        found += process_sweep.ray_cluster_processes(rnd.main_pid, rnd.born)
    if process_sweep.is_subreaper():
        found += process_sweep.descendants()
    names = process_sweep.end(found, LEFTOVER_GRACE_S)
    process_sweep.reap_children()
    if names:
        say(f"run_unit: stopped {len(names)} process(es) that pytest left behind: {', '.join(names)}")


# --- signals ------------------------------------------------------------------------------

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def _terminal_sent_it_to_the_child() -> bool:
    """Whether a SIGINT came from our terminal's Ctrl-C, which reaches the whole foreground
    process group (pytest included): forwarding it would deliver it twice."""
    try:
        with open("/dev/tty", "rb") as tty:
            return os.tcgetpgrp(tty.fileno()) == os.getpgrp()
    except OSError:
        return False


_PR_SET_PDEATHSIG = 1


def _die_with(parent: int) -> Callable[[], None] | None:
    """What pytest's process runs before its exec: SIGKILL when `parent` (the supervisor) dies,
    so no pytest goes on alone and writes its record after the run ended (Linux's
    PR_SET_PDEATHSIG; elsewhere the recorder's check that its supervisor lives stands in)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl  # looked up before the fork
    except (OSError, AttributeError):
        return None

    def set_parent_death_signal() -> None:
        prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
        if os.getppid() != parent:  # the supervisor died before the signal was set
            os._exit(1)

    return set_parent_death_signal


def run_forwarding_signals(
    cmd: Sequence[str],
    env: dict[str, str],
    on_start: Callable[[int], None] | None = None,
    on_tick: Callable[[], None] | None = None,
) -> tuple[int, str | None]:
    """Run pytest; SIGINT/SIGTERM/SIGHUP sent to this process are passed on to it, and we wait
    for it to finish (its results file included), calling `on_tick` every POLL_S.
    (exit code, name of the first stop signal)."""
    proc = subprocess.Popen(list(cmd), env=env, preexec_fn=_die_with(os.getpid()))  # noqa: PLW1509
    if on_start is not None:
        on_start(proc.pid)
    received: list[int] = []

    def forward(signum: int, _frame: object) -> None:
        received.append(signum)
        if signum == signal.SIGINT and _terminal_sent_it_to_the_child():
            return
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signum)

    # A signal this process ignores (nohup, a background job without job control) is ignored
    # by pytest too: it inherits the disposition; neither forward it nor count it.
    previous = {s: signal.signal(s, forward) for s in STOP_SIGNALS if signal.getsignal(s) != signal.SIG_IGN}
    try:
        while True:
            try:
                code = proc.wait(timeout=POLL_S)
                break
            except subprocess.TimeoutExpired:
                if on_tick is not None and not received:
                    on_tick()
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    return code, signal.Signals(received[0]).name if received else None
