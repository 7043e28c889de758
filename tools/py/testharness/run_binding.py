"""Which run a process belongs to (pure: no pytest, no Ray).

run_unit's supervisor tells the pytest it starts where its round's files are (the supervise
directory, the summary file, the tests a continuation runs, what earlier rounds recorded) through
environment variables, and every process that pytest starts inherits them: a test that runs
`python -m pytest` (a plugin's suite, `pytester.runpytest_subprocess`) would otherwise journal
into the run's files and write its record and history. So a process takes them only where it is
bound to the run by its place in the process tree, which nothing inherits by accident:

- the supervisor's own pytest: its parent is the supervisor (TESTHARNESS_SUPERVISOR_PID);
- an xdist worker of it (execnet starts each worker as a child of the controller, which sets
  PYTEST_XDIST_WORKER before the worker imports any plugin): its parent's parent is the
  supervisor.

Any other process that finds them is inside a run without being part of it (`nested`): they are
removed from its environment (its own children inherit none of them) and TESTHARNESS_INSIDE_RUN
is set in their place, so that it and every pytest below it write no record nor history unless
given a results directory of their own on the command line (--unit-results-dir).
"""

from __future__ import annotations

import os
from collections.abc import Callable, MutableMapping
from dataclasses import dataclass
from pathlib import Path

from testharness.crash_record import (
    CARRIED_ENV,
    ONLY_ENV,
    SUMMARY_FILE_ENV,
    SUPERVISE_DIR_ENV,
    SUPERVISOR_PID_ENV,
)
from testharness.history import HISTORY_ENV, RESULTS_DIR_ENV

INSIDE_ENV = "TESTHARNESS_INSIDE_RUN"  # set in a process that is inside a run without being its process
XDIST_WORKER_ENV = "PYTEST_XDIST_WORKER"
# What a process drops when it is not the run's: the round's files, and where the run's record
# and history go (a user's TESTHARNESS_RESULTS_DIR for the run is not the nested pytest's).
RUN_VARIABLES = (
    SUPERVISE_DIR_ENV,
    SUMMARY_FILE_ENV,
    SUPERVISOR_PID_ENV,
    ONLY_ENV,
    CARRIED_ENV,
    RESULTS_DIR_ENV,
    HISTORY_ENV,
)


@dataclass(frozen=True)
class Binding:
    """This process's part in a supervised run: the round's files where it is bound (else None),
    and whether it is inside a run it is not part of."""

    supervise_dir: Path | None = None
    summary_file: Path | None = None
    only_file: Path | None = None
    carried_file: Path | None = None
    supervisor_pid: int | None = None
    nested: bool = False


def parent_of(pid: int) -> int | None:
    """The parent of process `pid` (None: gone, or not to be read)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="utf-8", errors="replace")
        return int(stat.rpartition(")")[2].split()[1])  # the command may hold spaces and ")"
    except (OSError, ValueError, IndexError):
        pass
    try:
        import psutil

        return int(psutil.Process(pid).ppid())
    except Exception:  # noqa: BLE001  psutil missing, the process gone, no permission: not known
        return None


def _path(environ: MutableMapping[str, str], name: str) -> Path | None:
    value = environ.get(name)
    return Path(value) if value else None


def bind(environ: MutableMapping[str, str], ppid: int, parent_of: Callable[[int], int | None] = parent_of) -> Binding:
    """This process's binding, from its environment and its parent (`ppid`); an unbound process
    that inherited a run's variables has them removed from `environ` (see the module's text)."""
    supervisor = environ.get(SUPERVISOR_PID_ENV, "")
    if supervisor.isdigit():
        pid = int(supervisor)
        if ppid == pid or (environ.get(XDIST_WORKER_ENV) and parent_of(ppid) == pid):
            return Binding(_path(environ, SUPERVISE_DIR_ENV), _path(environ, SUMMARY_FILE_ENV),
                           _path(environ, ONLY_ENV), _path(environ, CARRIED_ENV), pid)  # fmt: skip
    inherited = any(environ.get(name) for name in (SUPERVISE_DIR_ENV, SUMMARY_FILE_ENV, SUPERVISOR_PID_ENV))
    if not inherited and environ.get(INSIDE_ENV) != "1":
        return Binding()
    for name in RUN_VARIABLES:
        environ.pop(name, None)
    environ[INSIDE_ENV] = "1"
    return Binding(nested=True)


_THIS: Binding | None = None


def this_process() -> Binding:
    """This process's binding, decided once (as the plugin is imported, before any conftest)."""
    global _THIS
    if _THIS is None:
        _THIS = bind(os.environ, os.getppid())
    return _THIS


def supervisor_gone(binding: Binding) -> bool:
    """Whether the supervisor this process is bound to is gone: the run is over, and what this
    process would write now could land among a later run's files. (Its parent-death signal ends
    pytest with it on Linux; this covers the rest.)"""
    if binding.supervisor_pid is None:
        return False
    try:
        os.kill(binding.supervisor_pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False
