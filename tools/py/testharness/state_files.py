"""Files a test run keeps between runs: checked before use, moved aside when damaged, and
updated under a lock (pure: no pytest).

A damaged state file must never end a run: it is renamed to `<name>.corrupt-<stamp>` (kept
for a post-mortem, never deleted) and its owner starts afresh, as on a first run. An SQLite
database travels with its side files (`-wal`, `-shm`, `-journal`): a write-ahead log left
beside a new database would be replayed into it.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

SQLITE_SIDE_FILES = ("-wal", "-shm", "-journal")
_DAMAGED = ("SQLITE_CORRUPT", "SQLITE_NOTADB")  # error names, prefixes (SQLITE_CORRUPT_INDEX, ...)


def timestamp() -> str:
    """UTC, sortable, safe in a file name: 20260131T235959Z."""
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())


def _kind(path: Path) -> str:
    return "a directory" if path.is_dir() else "not a regular file"


def sqlite_problem(path: Path, busy_timeout: float = 10.0) -> str | None:
    """What makes the SQLite database at `path` unusable, in a few words; None when it is
    usable, absent, or in use by a writer for longer than `busy_timeout` (not ours to judge).

    Read-only and cheap: the header, the schema and `PRAGMA quick_check` (no index
    cross-checks; about 0.2 s for 100 MB). A database in WAL mode may be left with empty
    `-wal`/`-shm` files, as any reader leaves them.
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
    return None


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


def recover_sqlite(path: Path, root: Path, stamp: str | None = None) -> str | None:
    """Check the database at `path`; when damaged, move it (and its side files) aside so its
    owner creates a fresh one. Returns the one-line warning, or None when all is well."""
    problem = sqlite_problem(path)
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


def load_json_state(path: Path, fmt: str, version: int) -> tuple[dict[str, Any] | None, str | None]:
    """A JSON state file of the given `format` and `version`: (data, None) when valid, (None,
    None) when absent, (None, warning) otherwise. Never raises: its owner rebuilds what is lost."""
    if os.path.lexists(path) and not path.is_file():
        # A directory (or a FIFO: reading would block) is never replaced by a save: move it.
        what = "a directory" if path.is_dir() else "not a regular file"
        try:
            moved = move_aside(path, timestamp())
        except OSError as exc:
            return (
                None,
                f"{path.name} is {what} and could not be moved aside ({exc.strerror or exc}); remove it by hand",
            )
        return None, f"{path.name} is {what}; moved it to {moved.name}, rebuilding it"
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None, None
    except UnicodeDecodeError:
        return None, f"{path.name} is corrupted (not UTF-8 text); rebuilding it"
    except OSError as exc:
        return None, f"{path.name} is unreadable ({exc.__class__.__name__}); rebuilding it"
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        return None, f"{path.name} is corrupted (not JSON); rebuilding it"
    if not isinstance(data, dict) or data.get("format") != fmt:
        return None, f"{path.name} is not a {fmt} file; rebuilding it"
    if data.get("version") != version:
        return None, f"{path.name} has format version {data.get('version')!r}, expected {version}; rebuilding it"
    return data, None
