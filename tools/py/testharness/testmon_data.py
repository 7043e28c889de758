"""pytest hooks that keep pytest-testmon's database usable (the checks live in state_files.py).

pytest-testmon opens its SQLite file in its own `pytest_configure`; a damaged one (garbage,
a truncated copy, a directory at the path) would end every `--testmon` run in an
INTERNALERROR. A tryfirst `pytest_configure` runs before testmon's:

* it checks the file (SQLite's integrity check; testmon's tables, in a file of testmon's
  version) and, when damaged, moves it (with its side files) aside with one warning line, so
  testmon creates a fresh one and selects as on a first run;
* it takes `<datafile>.lock`, held until the session starts (every `pytest_configure` has
  run), so two sessions started together do not both create the database (testmon deletes
  and re-creates a file whose version it does not know: the other one then fails with
  "disk I/O error"), and a session never moves aside a database another is creating.

A directory at a path set by hand ($TESTMON_DATAFILE) is a usage error (one line), never
moved. Inert without testmon's options, and in xdist workers (they open the file read-only, after
the controller).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Generator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest

from testharness.contract import is_xdist_worker

PREFIX = "testmon-data"
ENV, DEFAULT_NAME = "TESTMON_DATAFILE", ".testmondata"  # pytest-testmon's names
_LINES = pytest.StashKey[list[str]]()
_HELD = pytest.StashKey[ExitStack]()
_OPTIONS = ("testmon", "testmon_noselect", "testmon_nocollect", "testmon_forceselect")


def datafile(config: pytest.Config) -> Path:
    """Where pytest-testmon keeps its data: $TESTMON_DATAFILE (else `.testmondata`), joined to
    the rootdir as testmon does (an absolute value stands alone)."""
    return Path(str(config.rootpath), os.environ.get(ENV, DEFAULT_NAME))


def _testmon_opens_its_file(config: pytest.Config) -> bool:
    """testmon's own activation rule (its configure.py), for a local file."""
    option = config.option
    if getattr(option, "no-testmon", False) or getattr(option, "tmnet", False):
        return False
    return any(getattr(option, name, False) for name in _OPTIONS)


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    if is_xdist_worker(config) or not _testmon_opens_its_file(config):
        return
    from .state_files import (  # deferred: sqlite3 and all, for --testmon runs only
        TESTMON_SCHEMA,
        exclusive,
        recover_sqlite,
    )

    path = datafile(config)
    if ENV in os.environ and path.is_dir():
        # Only testmon's default name is surely testmon's: a directory named by hand (the
        # repository, /tmp, an empty value) is the user's, never moved aside.
        raise pytest.UsageError(f"{ENV}={os.environ[ENV]!r} names a directory ({path}); point it at a file")
    lines = config.stash.setdefault(_LINES, [])
    held = ExitStack()
    config.stash[_HELD] = held
    config.add_cleanup(held.close)  # when configure fails: pytest_unconfigure time
    try:
        held.enter_context(exclusive(path))
    except OSError as exc:
        lines.append(f"{PREFIX}: warning: going on without the lock on {path.name} ({exc})")
    warning = recover_sqlite(path, Path(str(config.rootpath)), schema=TESTMON_SCHEMA)
    if warning:
        lines.append(f"{PREFIX}: warning: {warning}")


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_sessionstart(session: pytest.Session) -> Generator[None, Any, Any]:
    # Every pytest_configure has run, so testmon has opened its database: release the lock.
    held = session.config.stash.get(_HELD, None)
    if held is not None:
        held.close()
    result = yield  # the terminal's header is written in here: the warning follows it, with -q too
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    for line in session.config.stash.get(_LINES, []):
        if reporter is not None:
            reporter.write_line(line, yellow=True)
        else:
            print(line, file=sys.stderr)
    return result
