"""The files a supervised run leaves as it goes, so that a pytest process that dies (a
segfault, an abort, `os._exit`, an OOM kill, a hang killed from outside) still gets one
true record (pure: no pytest, no Ray).

run_unit's supervisor (testharness.supervisor) gives each pytest it starts a directory
(TESTHARNESS_SUPERVISE_DIR); the plugin (testharness.supervised) keeps in it:

- `journal.jsonl`, appended by the process that owns the record (pytest, or xdist's
  controller), one JSON object a line: `{"session": {"results_dir", "start", "shard", "root",
  "runs_tests"}}` as
  the session starts, `{"selected": [node ids]}` once collection is done, per finished
  test `{"test": node id, "record": <its entry in unit_results.json>, "metrics": {...} |
  null, "memory": [source, [gpu names]]}` (a rerun appends again: the last line wins),
  `{"ending": true}` as the session's end (pytest_sessionfinish) begins, and `{"returned":
  code, "threads": [names]}` when pytest's main returned (its process has only Python's exit
  left to do, which waits for those non-daemon threads), with `"usage_error": pytest's words`
  when its session ended on a UsageError (`file or directory not found: ...`, exit 4).
  Appends of one short line survive the process dying right after; a torn last line is
  skipped.
- `running/<pid>.json`: the test each test process (pytest, or an xdist worker) is in:
  `{"nodeid", "key", "pid", "started", "deadline", "around"}`, `deadline` (epoch seconds)
  being when its in-process watchdog should have ended it (None: no timeout), `around` the
  test's own outcome once its own fixtures are torn down and only the fixtures around it
  (module, class, session) are left to tear down (None before).
- `faults/<pid>.txt`: that process's faulthandler output: the Python stacks of a fatal
  signal, and the dumps the supervisor asks for before it kills a stuck process.
- `verdicts/<pid>.json`: `{"nodeid", "cause", "stack"}` written by the supervisor before it
  kills a process stuck past its deadline, so the crash is recorded as a timeout.
"""

from __future__ import annotations

import json
import os
import re
import signal
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from testharness.atomic_io import hidden_temp_beside, write_json_atomic

# What run_unit's supervisor tells the pytest it starts (no pytest import here: run_unit's
# --help needs neither pytest nor Ray).
SUPERVISE_DIR_ENV = "TESTHARNESS_SUPERVISE_DIR"  # the directory of these files; every process a
# round's pytest starts inherits it (the supervisor finds what a round left behind by it where it
# is no subreaper), but only the round's pytest and its xdist workers take it: run_binding
ONLY_ENV = "TESTHARNESS_ONLY_TESTS"  # a JSON list: the node ids a continuation runs
CARRIED_ENV = "TESTHARNESS_CARRIED"  # what the earlier rounds recorded (record.Record.carried_document)
SUMMARY_FILE_ENV = "TESTHARNESS_SUMMARY_FILE"  # how the session ended (testharness.run_summary)
SUPERVISOR_PID_ENV = "TESTHARNESS_SUPERVISOR_PID"  # pytest's parent: once it is gone, the run is over
DUMP_SIGNAL = signal.SIGUSR2  # faulthandler dumps the stacks on it

JOURNAL = "journal.jsonl"
RUNNING = "running"
FAULTS = "faults"
VERDICTS = "verdicts"
STACK_LIMIT = 20_000  # characters of a stack kept in the record (the start and the end)

# --- the journal ----------------------------------------------------------------------------


def append_line(path: Path, entry: Mapping[str, Any]) -> None:
    """Append one JSON line in one write (O_APPEND): it is in the file once this returns,
    whatever the process does next."""
    data = (json.dumps(entry, separators=(",", ":"), default=str) + "\n").encode()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o666)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)


@dataclass
class Journal:
    """What one pytest process journaled before it ended (or died)."""

    session: dict[str, Any] = field(default_factory=dict)
    selected: list[str] | None = None  # None: it died before collection was done
    finished: dict[str, dict[str, Any]] = field(default_factory=dict)  # node id -> its line
    fresh_process: tuple[str, str] | None = None  # (node id, why): the process ended itself after it
    ending: bool = False  # the session's end (pytest_sessionfinish) began
    returned: int | None = None  # what pytest's main returned (None: it never returned)
    threads: list[str] = field(default_factory=list)  # then: the non-daemon threads Python's exit waits for
    usage_error: str | None = None  # pytest refused what it was given in its session (a path not found)

    def unrecorded(self, recorded: Iterable[str] = ()) -> list[str]:
        """The selected tests with neither a finished line nor an entry in `recorded`."""
        done = {*self.finished, *recorded}
        return [nodeid for nodeid in self.selected or [] if nodeid not in done]


def read_journal(directory: Path) -> Journal:
    journal = Journal()
    try:
        text = (directory / JOURNAL).read_text(encoding="utf-8")
    except OSError:
        return journal
    for line in text.splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue  # a line torn by the process dying mid-write
        if not isinstance(entry, dict):
            continue
        if isinstance(entry.get("session"), dict):
            journal.session = entry["session"]
        elif isinstance(entry.get("selected"), list):
            journal.selected = [n for n in entry["selected"] if isinstance(n, str)]
        elif isinstance(entry.get("fresh_process"), str):
            journal.fresh_process = (entry["fresh_process"], str(entry.get("cause", "")))
        elif isinstance(entry.get("test"), str) and isinstance(entry.get("record"), dict):
            journal.finished[entry["test"]] = entry
        elif entry.get("ending") is True:
            journal.ending = True
        elif isinstance(entry.get("returned"), int):
            journal.returned = entry["returned"]
            threads = entry.get("threads")
            journal.threads = [t for t in threads if isinstance(t, str)] if isinstance(threads, list) else []
            usage_error = entry.get("usage_error")
            journal.usage_error = usage_error if isinstance(usage_error, str) else None
    return journal


# --- which test each process is in -----------------------------------------------------------


@dataclass(frozen=True)
class Breadcrumb:
    nodeid: str
    key: str
    pid: int
    started: float  # epoch seconds
    deadline: float | None = None
    around: str | None = None  # the test's outcome, once only the fixtures around it are left to tear down

    def as_json(self) -> dict[str, Any]:
        return {"nodeid": self.nodeid, "key": self.key, "pid": self.pid, "started": self.started,
                "deadline": self.deadline, "around": self.around}  # fmt: skip

    @classmethod
    def from_json(cls, data: Any) -> Breadcrumb | None:
        if not isinstance(data, dict):
            return None
        nodeid, key, pid, started = (data.get(k) for k in ("nodeid", "key", "pid", "started"))
        deadline, around = data.get("deadline"), data.get("around")
        if not (isinstance(nodeid, str) and isinstance(key, str) and isinstance(pid, int)):
            return None
        if not isinstance(started, (int, float)) or not (deadline is None or isinstance(deadline, (int, float))):
            return None
        return cls(nodeid, key, pid, float(started), None if deadline is None else float(deadline),
                   around if isinstance(around, str) else None)  # fmt: skip


def write_breadcrumb(directory: Path, crumb: Breadcrumb) -> None:
    """Replace the process's breadcrumb in one step. No fsync (write_json_atomic's): it only has
    to outlive the process, not the machine, and is written twice per test."""
    path = directory / RUNNING / f"{crumb.pid}.json"
    tmp = hidden_temp_beside(path)
    try:
        tmp.write_text(json.dumps(crumb.as_json()), encoding="utf-8")
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def clear_breadcrumb(directory: Path, pid: int) -> None:
    (directory / RUNNING / f"{pid}.json").unlink(missing_ok=True)


def read_breadcrumbs(directory: Path) -> list[Breadcrumb]:
    crumbs = []
    for path in sorted((directory / RUNNING).glob("*.json")):
        try:
            crumb = Breadcrumb.from_json(json.loads(path.read_text(encoding="utf-8")))
        except (OSError, ValueError):
            continue  # removed as we read it: that test ended
        if crumb is not None:
            crumbs.append(crumb)
    return crumbs


def overdue(crumbs: Iterable[Breadcrumb], now: float, grace_s: float) -> list[Breadcrumb]:
    """The processes still in a test `grace_s` past their watchdog's deadline: the watchdog
    could not run (a C call holding the GIL, signals blocked)."""
    return [c for c in crumbs if c.deadline is not None and now > c.deadline + grace_s]


# --- why a process died ----------------------------------------------------------------------


def fault_path(directory: Path, pid: int) -> Path:
    return directory / FAULTS / f"{pid}.txt"


def clip(text: str, limit: int = STACK_LIMIT) -> str:
    if len(text) <= limit:
        return text
    half = limit // 2
    return f"{text[:half]}\n... ({len(text) - limit} characters left out) ...\n{text[-half:]}"


def read_fault(directory: Path, pid: int) -> str:
    try:
        return clip(fault_path(directory, pid).read_text(encoding="utf-8", errors="replace").strip())
    except OSError:
        return ""


def write_verdict(directory: Path, pid: int, nodeid: str, cause: str, stack: str) -> None:
    write_json_atomic(directory / VERDICTS / f"{pid}.json", {"nodeid": nodeid, "cause": cause, "stack": clip(stack)})


def read_verdict(directory: Path, pid: int) -> dict[str, str] | None:
    try:
        data = json.loads((directory / VERDICTS / f"{pid}.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if isinstance(data, dict) and all(isinstance(data.get(k), str) for k in ("nodeid", "cause", "stack")):
        return {k: data[k] for k in ("nodeid", "cause", "stack")}
    return None


def exit_cause(code: int) -> str:
    """What a process's exit code says about how it ended (Popen: -N for signal N)."""
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        if -code == signal.SIGKILL:
            return f"killed by {name} (from outside: the kernel's out-of-memory killer, or a kill -9)"
        return f"killed by {name}"
    return f"the process exited with code {code} in the middle of the test (os._exit, or a library ending it)"


def fault_cause(stack: str) -> str | None:
    """The fatal signal faulthandler names ("Fatal Python error: Segmentation fault"), if any."""
    for line in stack.splitlines():
        if line.startswith("Fatal Python error: "):
            return line.removeprefix("Fatal Python error: ").strip()
    return None


def crashed_thread(stack: str, lines: int = 30) -> list[str]:
    """The part of a dump worth a terminal: the thread that crashed or holds the GIL (the
    record keeps every thread)."""
    text = stack.splitlines()
    start = next((i for i, line in enumerate(text) if line.startswith("Current thread") or "+gil)" in line), 0)
    return text[start : start + lines]


# CUDA errors after which the process's CUDA context is unusable: every later CUDA call in the
# process fails with them too, so the tests after it need a fresh process.
_STICKY_CUDA = re.compile(
    r"CUDA error: (device-side assert triggered|an illegal memory access was encountered"
    r"|unspecified launch failure|misaligned address|an illegal instruction was encountered)"
)


def sticky_cuda_error(text: str) -> str | None:
    """The CUDA error in a failure's text that leaves the process's CUDA context unusable."""
    match = _STICKY_CUDA.search(text)
    return match.group(0) if match else None


def where_it_died(crumb: Breadcrumb) -> str:
    """Where in its test a process died, for the cause: only the fixtures around a test that
    ended its own part are not the test."""
    if crumb.around is None:
        return ""
    return f", in the teardown of the fixtures around it (module, class or session scope) after the test {crumb.around}"
