"""Files a test run keeps between runs: checked before use, moved aside when damaged, and
updated under a lock (pure: no pytest).

A damaged state file must never end a run: it is renamed to `<name>.corrupt-<stamp>` (kept
for a post-mortem, never deleted) and its owner starts afresh, as on a first run. An SQLite
database travels with its side files (`-wal`, `-shm`, `-journal`): a write-ahead log left
beside a new database would be replayed into it.

A JSON state file is read through a `JsonFormat`: `read` is strict (what `testharness state
load` checks an artifact's members with), `load` is what a run uses: any error while reading
or parsing it (not JSON, nested too deep, a field of the wrong type, a bug in the parser) is
one line, and the file is moved aside for its owner to rebuild.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import sqlite3
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar

T = TypeVar("T")
SQLITE_SIDE_FILES = ("-wal", "-shm", "-journal")
_DAMAGED = ("SQLITE_CORRUPT", "SQLITE_NOTADB")  # error names, prefixes (SQLITE_CORRUPT_INDEX, ...)


@dataclass(frozen=True)
class SqliteSchema:
    """The tables a database of one format version holds."""

    user_version: int
    tables: frozenset[str]


# pytest-testmon's database (its db.py, DATA_VERSION 14; test_state_files checks this against
# the installed testmon). A file of another version is testmon's to judge: it re-creates it.
TESTMON_SCHEMA = SqliteSchema(
    14,
    frozenset(
        {"metadata", "environment", "test_execution", "file_fp", "test_execution_file_fp", "suite_execution_file_fsha"}
    ),
)


def one_line(exc: BaseException) -> str:
    """An exception as a few words on one line: `KeyError: 'x'`."""
    text = " ".join(str(exc).split())
    return f"{exc.__class__.__name__}: {text}" if text else exc.__class__.__name__


def timestamp() -> str:
    """UTC, sortable, safe in a file name: 20260131T235959Z."""
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())


def _kind(path: Path) -> str:
    return "a directory" if path.is_dir() else "not a regular file"


def sqlite_problem(
    path: Path, busy_timeout: float = 10.0, schema: SqliteSchema | None = None, exact: bool = False
) -> str | None:
    """What makes the SQLite database at `path` unusable, in a few words; None when it is
    usable, absent, or in use by a writer for longer than `busy_timeout` (not ours to judge).

    Read-only and cheap: the header, the schema and `PRAGMA quick_check` (no index
    cross-checks; about 0.2 s for 100 MB). A database in WAL mode may be left with empty
    `-wal`/`-shm` files, as any reader leaves them. With a `schema`, a database of its
    version must hold its tables; `exact`: it must be of that version too.
    """
    if not os.path.lexists(path):
        return None
    if not path.is_file():
        return f"is {_kind(path)}"
    for suffix in SQLITE_SIDE_FILES:
        side = path.with_name(path.name + suffix)
        if os.path.lexists(side) and not side.is_file():
            return f"has a {suffix[1:]} side file that is {_kind(side)}"
    try:
        con = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True, timeout=busy_timeout)
        try:
            rows = con.execute("PRAGMA quick_check(1)").fetchall()
            lacks = _schema_problem(con, schema, exact) if schema is not None and rows == [("ok",)] else None
        finally:
            con.close()
    except sqlite3.Error as exc:
        name = getattr(exc, "sqlite_errorname", "") or ""
        if name.startswith(_DAMAGED):
            return f"is damaged ({exc})"
        return None  # busy, locked, permissions: the owner reports those itself
    if rows != [("ok",)]:
        first = str(rows[0][0]) if rows and rows[0] else "no result"
        first = " ".join(first.replace("*** in database main ***", "").split())  # one line
        return f"fails SQLite's integrity check ({first})"
    return lacks


def _schema_problem(con: sqlite3.Connection, schema: SqliteSchema, exact: bool) -> str | None:
    version = con.execute("PRAGMA user_version").fetchone()[0]
    if version != schema.user_version:
        return f"has format version {version}, expected {schema.user_version}" if exact else None
    tables = {row[0] for row in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    missing = sorted(schema.tables - tables)
    return f"lacks its table {missing[0]!r}" if missing else None


def free_name(path: Path, stamp: str, suffixes: tuple[str, ...] = ()) -> Path:
    """`<name>.corrupt-<stamp>` beside `path` (`-2`, `-3`, ... when taken, side files included)."""
    n = 1
    while True:
        target = path.with_name(f"{path.name}.corrupt-{stamp}" + (f"-{n}" if n > 1 else ""))
        if not any(os.path.lexists(target.with_name(target.name + s)) for s in ("", *suffixes)):
            return target
        n += 1


def move_aside(path: Path, stamp: str, side_files: tuple[str, ...] = ()) -> Path:
    """Rename `path` (a file, a directory, anything) to `<name>.corrupt-<stamp>`, its side
    files first (to the same name plus their suffix); return the new path."""
    target = free_name(path, stamp, side_files)
    for suffix in side_files:
        side = path.with_name(path.name + suffix)
        if os.path.lexists(side):
            os.rename(side, target.with_name(target.name + suffix))
    os.rename(path, target)
    return target


def shown(path: Path, root: Path) -> str:
    """`path` relative to `root` when inside it (what a user types), else absolute."""
    try:
        return path.relative_to(root).as_posix()
    except ValueError:
        return str(path)


def recover_sqlite(path: Path, root: Path, stamp: str | None = None, schema: SqliteSchema | None = None) -> str | None:
    """Check the database at `path` (against `schema`, when given); when damaged, move it (and
    its side files) aside so its owner creates a fresh one. Returns the one-line warning, or
    None when all is well."""
    problem = sqlite_problem(path, schema=schema)
    if problem is None:
        return None
    name = shown(path, root)
    try:
        moved = move_aside(path, stamp or timestamp(), SQLITE_SIDE_FILES)
    except OSError as exc:
        return f"{name} {problem} and could not be moved aside ({exc.strerror or exc}); remove it by hand"
    return f"{name} {problem}; moved it to {moved.name} and starting afresh (every test is selected)"


def lock_path(path: Path) -> Path:
    """The lock file that guards `path`: `<name>.lock` beside it."""
    return path.with_name(path.name + ".lock")


@contextmanager
def exclusive(path: Path, timeout: float = 60.0, poll: float = 0.05) -> Iterator[None]:
    """Hold an exclusive `flock` on `<path>.lock` for the block; other processes that ask wait.

    The lock file is removed (while still held) on release, so none is left behind; a
    waiter that then wakes on the removed file retries on the path's current one. Raises
    TimeoutError (an OSError) after `timeout` seconds without the lock.
    """
    lock = lock_path(path)
    deadline = time.monotonic() + timeout
    while True:
        fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o666)
        try:
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except OSError as exc:
                    if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                        raise
                    if time.monotonic() >= deadline:
                        raise TimeoutError(f"{lock.name} held by another process for {timeout:.0f} s") from None
                    time.sleep(poll)
            held = os.fstat(fd)
            try:
                now = os.stat(lock)
            except FileNotFoundError:
                now = None
        except BaseException:
            os.close(fd)
            raise
        if now is not None and (now.st_dev, now.st_ino) == (held.st_dev, held.st_ino):
            break
        os.close(fd)  # the holder before us removed that file: lock the current one
    try:
        yield
    finally:
        try:
            os.unlink(lock)
        except OSError:
            pass
        os.close(fd)


class Unusable(Exception):
    """Why a state file cannot be used, in a few words (`why`). `outdated`: another format
    version, replaced by the next save, not moved aside; `movable`: the file itself is at fault
    (not, say, a permission)."""

    def __init__(self, why: str, outdated: bool = False, movable: bool = True):
        super().__init__(why)
        self.why, self.outdated, self.movable = why, outdated, movable


def set_aside(path: Path, why: str, then: str) -> str:
    """Move a damaged `path` aside; the one line that says so (`then`: what happens next)."""
    try:
        moved = move_aside(path, timestamp())
    except OSError as exc:
        return f"{path.name} {why} and could not be moved aside ({exc.strerror or exc}); remove it by hand"
    return f"{path.name} {why}; moved it to {moved.name}; {then}"


@dataclass(frozen=True)
class JsonFormat(Generic[T]):
    """A JSON state file: `{"format": name, "version": version, ...}`, turned into a T by
    `parse` (which raises on anything malformed: ValueError with a one-line message, or any
    other error)."""

    name: str
    version: int
    parse: Callable[[dict[str, Any]], T]

    def read(self, path: Path) -> T | None:
        """The file's content (None: absent); Unusable when anything about it is wrong."""
        if os.path.lexists(path) and not path.is_file():
            raise Unusable(f"is {_kind(path)}")  # never replaced by a save (a FIFO would block a read)
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return None
        except UnicodeDecodeError:
            raise Unusable("is corrupted (not UTF-8 text)") from None
        except OSError as exc:
            raise Unusable(f"is unreadable ({exc.__class__.__name__})", movable=False) from None
        try:
            data = json.loads(text)
        except RecursionError:
            raise Unusable("is corrupted (JSON nested too deep)") from None
        except ValueError:
            raise Unusable("is corrupted (not JSON)") from None
        if not isinstance(data, dict) or data.get("format") != self.name:
            raise Unusable(f"is not a {self.name} file")
        if data.get("version") != self.version:
            raise Unusable(f"has format version {data.get('version')!r}, expected {self.version}", outdated=True)
        try:
            return self.parse(data)
        except Exception as exc:  # noqa: BLE001  whatever the content makes the parser do: damaged
            why = str(exc) if isinstance(exc, ValueError) and str(exc) else one_line(exc)
            raise Unusable(f"has an unexpected structure ({' '.join(why.split())})") from None

    def load(self, path: Path, then: str = "rebuilding it") -> tuple[T | None, str | None]:
        """(content, None) when valid, (None, None) when absent, (None, one line) otherwise: a
        damaged file is moved aside (`then`: what its owner does next). Never raises."""
        try:
            return self.read(path), None
        except Unusable as exc:
            if exc.outdated or not exc.movable:
                return None, f"{path.name} {exc.why}; {then}"
            return None, set_aside(path, exc.why, then)
