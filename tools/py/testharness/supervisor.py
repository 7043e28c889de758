"""run_unit's supervisor: it runs pytest, outlives it, and keeps the record true whatever a
test does to its process.

- A test that kills pytest (a segfault or abort in C code, `os._exit`, the OOM killer): the
  supervisor names the test (its breadcrumb), records it failed with the cause and the
  stacks faulthandler wrote, and starts pytest again on the tests not yet run (same
  arguments; only those node ids), handing on what was recorded: the last round writes ONE
  record of every selected test, and the run exits 1.
- A test stuck past its watchdog's deadline, which the watchdog could not end (a C call that
  holds the GIL, signals blocked): the supervisor dumps its process's stacks (py-spy, native
  frames included; else faulthandler's dump on SIGUSR2), kills it, and records the test as
  timed out with the dump. Serially the run goes on as above; under -n the process is an xdist
  worker, and xdist goes on with a fresh one.
Files between the plugin and the supervisor: testharness.crash_record.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from testharness import crash_record, metrics, results
from testharness.crash_record import (
    CARRIED_ENV,
    DUMP_SIGNAL,
    ONLY_ENV,
    SUMMARY_FILE_ENV,
    SUPERVISE_DIR_ENV,
    Carried,
)

GRACE_S = 5.0  # past a watchdog's deadline: it would have run by now, were it able to
POLL_S = 0.5
PYSPY_TIMEOUT_S = 30.0
# Arguments after which a failure ends the run: a crash is one, so nothing goes on after it.
STOP_AT_FAILURE = ("-x", "--exitfirst", "--sw", "--stepwise", "--maxfail=1")


@dataclass
class Outcome:
    """How the run as a whole ended, for unit_runner.interpret_exit."""

    code: int
    stopped_by: str | None
    summary: dict[str, Any] | None


@dataclass
class _Round:
    directory: Path
    main_pid: int = 0
    born: float = 0.0  # when pytest started (epoch seconds)
    killed: dict[int, dict[str, str]] = field(default_factory=dict)  # pid -> verdict

    def started(self, pid: int) -> None:
        self.main_pid, self.born = pid, time.time() - 1.0  # create_time is rounded: a margin

    def enforce(self) -> None:
        _enforce(self)


def _say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def read_summary(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def supervise(cmd: list[str], env: dict[str, str], tmp: Path) -> Outcome:
    """Run pytest (`cmd`) until every selected test has an outcome: again on the tests not yet
    run each time a test kills its process."""
    carried = Carried()
    only: list[str] | None = None
    stop_at_failure = any(a in STOP_AT_FAILURE for a in cmd)
    for n in itertools.count(1):
        rnd = _Round(tmp / f"round{n}")
        rnd.directory.mkdir(parents=True)
        renv = {**env, SUPERVISE_DIR_ENV: str(rnd.directory), SUMMARY_FILE_ENV: str(rnd.directory / "summary.json")}
        if only is not None:
            (tmp / "only.json").write_text(json.dumps(only), encoding="utf-8")
            renv[ONLY_ENV] = str(tmp / "only.json")
        if carried.tests:
            (tmp / "carried.json").write_text(json.dumps(carried.as_json()), encoding="utf-8")
            renv[CARRIED_ENV] = str(tmp / "carried.json")
        code, stopped_by = run_forwarding_signals(cmd, renv, on_start=rnd.started, on_tick=rnd.enforce)
        summary = read_summary(rnd.directory / "summary.json")
        if summary is not None or stopped_by is not None:
            return Outcome(code, stopped_by, summary)  # pytest ended its session, or we were stopped
        sweep_ray_of(rnd.main_pid, rnd.born)
        journal = crash_record.read_journal(rnd.directory)
        if not journal.session:
            return Outcome(code, None, None)  # no session started: pytest refused its arguments or config
        carried.add_journal(journal)
        dead = _blame(rnd, journal, code, carried)
        if journal.selected is None:
            _say(f"run_unit: pytest died before its tests were collected ({crash_record.exit_cause(code)})")
            return Outcome(3, None, None)
        remaining = [nodeid for nodeid in journal.selected if nodeid not in carried.tests]
        if journal.fresh_process is not None:
            nodeid, cause = journal.fresh_process
            _say(f"run_unit: {nodeid} left the test process's CUDA context unusable ({cause}); "
                 "the tests after it run in a fresh process")  # fmt: skip
        if remaining and not dead and not journal.finished:
            cause = crash_record.exit_cause(code)
            _say(f"run_unit: pytest died outside any test ({cause}); {len(remaining)} test(s) not run")
            for nodeid in remaining:  # no progress to build on: they stay in the record, not run
                carried.tests[nodeid] = _not_run(nodeid, cause)
            remaining = []
        if not remaining or stop_at_failure:
            return _write_record(journal, carried)
        _say(f"run_unit: going on with the {len(remaining)} test(s) not run yet")
        only = remaining
    raise AssertionError("itertools.count never ends")


def _not_run(nodeid: str, cause: str) -> dict[str, Any]:
    return {"key": metrics.metric_key(nodeid), "outcome": "error", "duration": 0.0, "attempts": ["error"],
            "crash": {"cause": f"not run: pytest died before it ({cause})", "stack": ""}}  # fmt: skip


def _blame(rnd: _Round, journal: crash_record.Journal, code: int, carried: Carried) -> list[str]:
    """Record the tests the dead processes were in, with why they died; returns their ids."""
    ended = time.time()
    dead = []
    for crumb in crash_record.read_breadcrumbs(rnd.directory):
        if crumb.nodeid in journal.finished or crumb.nodeid in carried.tests:
            continue  # a worker crash xdist reported, or a process that ended between tests
        verdict = rnd.killed.get(crumb.pid)
        stack = verdict["stack"] if verdict is not None else crash_record.read_fault(rnd.directory, crumb.pid)
        if verdict is not None:
            cause = verdict["cause"]
        elif crumb.pid == rnd.main_pid:
            fatal = crash_record.fault_cause(stack)
            cause = crash_record.exit_cause(code) + (f": {fatal}" if fatal else "")
        else:
            cause = f"pytest died ({crash_record.exit_cause(code)}) while its xdist worker ran it"
        carried.tests[crumb.nodeid] = crash_record.crash_entry(crumb, cause, stack, ended)
        dead.append(crumb.nodeid)
        _say(f"run_unit: CRASHED: {crumb.nodeid}: {cause}")
        if stack:
            _say("\n".join("    " + line for line in crash_record.crashed_thread(stack)))
    return dead


def _write_record(journal: crash_record.Journal, carried: Carried) -> Outcome:
    """No pytest is left to write the record: write it here, as the tracker would have."""
    target = journal.session.get("results_dir")
    if not isinstance(target, str):
        return Outcome(1, None, None)  # the run writes no record (not on the test roots, no config)
    start = datetime.strptime(carried.start, results.START_TIME_FORMAT) if carried.start else datetime.now()
    root = Path(str(journal.session.get("root", ".")))
    shard = journal.session.get("shard")
    document = results.build_results(
        exit_status=1,
        git_commit=results.git_commit(root),
        start=start,
        metrics=carried.metrics,
        gpu_types=sorted(carried.gpu_names),
        coverage="not measured: the test process died",
        memory_source=carried.memory_source,
        tests={nodeid: results.OutcomeRecord.from_json(e) for nodeid, e in carried.tests.items()},
        shard=shard if isinstance(shard, str) else None,
    )
    try:
        latest, _dated = results.write_results(Path(target), document, start)
    except results.ResultsWriteError as exc:
        summary: dict[str, Any] = {"results_error": str(exc), "tests_exit_status": 1}
        return Outcome(3, None, summary)
    return Outcome(1, None, {"results": str(latest)})


# --- a test stuck where its watchdog cannot reach ------------------------------------------------


def _enforce(rnd: _Round) -> None:
    for crumb in crash_record.overdue(crash_record.read_breadcrumbs(rnd.directory), time.time(), GRACE_S):
        if crumb.pid in rnd.killed or not _alive(crumb.pid):
            continue
        seconds = (crumb.deadline or crumb.started) - crumb.started
        _say(f"run_unit: {crumb.nodeid} is stuck {GRACE_S:.0f} s past its {seconds:.0f} s timeout and its "
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


def sweep_ray_of(pid: int, born: float) -> None:
    """The Ray cluster a dead pytest started outlives it: end it before the next round."""
    import psutil

    from testharness.interrupts import ray_cluster_processes

    procs = ray_cluster_processes(pid, born)
    for p in procs:
        with contextlib.suppress(psutil.Error):  # already gone
            p.kill()


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


def run_forwarding_signals(
    cmd: Sequence[str],
    env: dict[str, str],
    on_start: Callable[[int], None] | None = None,
    on_tick: Callable[[], None] | None = None,
) -> tuple[int, str | None]:
    """Run pytest; SIGINT/SIGTERM/SIGHUP sent to this process are passed on to it, and we wait
    for it to finish (its results file included), calling `on_tick` every POLL_S.
    (exit code, name of the first stop signal)."""
    proc = subprocess.Popen(list(cmd), env=env)
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
