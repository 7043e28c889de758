"""`testharness state save FILE` / `load FILE`: the whole selection state as one artifact, so a
pull request's CI selects against its base branch instead of running everything.

The artifact is a gzipped tar: `manifest.json` first, then the state files, each under a
fixed name. What it holds: pytest-testmon's database (copied with SQLite's backup API: one
self-contained file, no `-wal`/`-shm`), the remote-select map, its parse cache and its
state, and the functional reach file; the manifest says which project, commit, Python and
environment (the digests of the files `[tool.testharness.functional] environment` names:
uv.lock, pyproject.toml, ...) they were made at, and the sha256 digest of each file.

`load` checks the artifact before anything in the checkout changes: its expanded size
(read as a stream, never whole: SQLITE_LIMIT, JSON_LIMIT, TOTAL_LIMIT), the manifest's fields, its
commit (a full id, an ancestor of HEAD), its project and environment, each member's digest
and format (the database opens, passes SQLite's integrity check and has testmon's tables;
each JSON file parses as its owner reads it). The members are staged in a temporary
directory and put in place only when all of them passed. Otherwise it removes the
checkout's own selection state, so everything runs, and says why in one line. Either way it
exits 0: CI goes on and runs what the state allows. docs/testmon.md states the trust model.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import io
import json
import os
import platform
import re
import shutil
import sqlite3
import sys
import tarfile
import tempfile
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from fnmatch import fnmatchcase
from pathlib import Path
from typing import IO, Any

from testharness.atomic_io import replacing
from testharness.functional import store as functional_store
from testharness.functional import tree
from testharness.project_root import find_project_root
from testharness.remote_select import store as remote_store
from testharness.remote_select.scan import digest_bytes
from testharness.settings import Settings, SettingsError, load_settings
from testharness.state_files import SQLITE_SIDE_FILES, TESTMON_SCHEMA, Unusable, one_line, shown, sqlite_problem

FORMAT = "testharness.selection_state"
VERSION = 2  # 2: the members' sha256 digests in the manifest
MANIFEST = "manifest.json"
TESTMON_ENV, TESTMON_DEFAULT = "TESTMON_DATAFILE", ".testmondata"  # pytest-testmon's names
DESCRIPTION = "Save the selection state (testmon, remote reach, functional reach) as one file, or load one."
PREFIX = "testharness state"
MiB = 2**20
# What a member may expand to (a database is checked on disk by SQLite; a JSON file is parsed
# in memory, several times its size), and the whole archive, tar headers included.
SQLITE_LIMIT, JSON_LIMIT, MANIFEST_LIMIT = 512 * MiB, 64 * MiB, 1 * MiB
TOTAL_LIMIT = 1024 * MiB
_CHUNK = 1 * MiB
_COMMIT = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")  # a full id: SHA-1, or SHA-256 repositories'
_SHA256 = re.compile(r"[0-9a-f]{64}")


class StateError(Exception):
    """Why a state artifact cannot be used here (one line)."""


@dataclass(frozen=True)
class Member:
    name: str  # inside the artifact
    path: Path  # in the checkout
    check: Callable[[Path], object]  # raises Unusable (or anything) when its owner could not use the file
    limit: int  # bytes
    sqlite: bool = False


def _check_testmon(path: Path) -> None:
    problem = sqlite_problem(path, schema=TESTMON_SCHEMA, exact=True)
    if problem is not None:
        raise Unusable(problem)


def members(settings: Settings) -> list[Member]:
    root = settings.root
    testmon = Path(root, os.environ.get(TESTMON_ENV, TESTMON_DEFAULT))
    map_file = settings.remote_map_file
    return [
        Member("testmondata.sqlite", testmon, _check_testmon, SQLITE_LIMIT, sqlite=True),
        Member("remote_map.json", map_file, remote_store.MAP.read, JSON_LIMIT),
        Member(
            "remote_parse_cache.json",
            remote_store.parse_cache_file(map_file),
            remote_store.PARSE_CACHE.read,
            JSON_LIMIT,
        ),
        Member("remote_state.json", settings.remote_state_file, remote_store.STATE.read, JSON_LIMIT),
        Member("functional_reach.json", settings.functional.reach_file, functional_store.REACH.read, JSON_LIMIT),
    ]


def project_name(root: Path) -> str:
    import tomllib

    try:
        data = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return root.name
    name = data.get("project", {}).get("name") if isinstance(data.get("project"), dict) else None
    return str(name) if name else root.name


def environment(settings: Settings) -> dict[str, str]:
    """{path: digest} of the repository files that make the environment."""
    globs = settings.functional.environment
    root = settings.root
    out: dict[str, str] = {}
    for rel in tree.repo_files(root):
        if any(fnmatchcase(rel, g) for g in globs) and (root / rel).is_file():
            out[rel] = digest_bytes((root / rel).read_bytes())
    return out


def _member_problem(m: Member, path: Path) -> str | None:
    """Why its owner could not use the file at `path` (None: it could), in a few words."""
    size = path.stat().st_size
    if size > m.limit:
        return f"is {size / MiB:.0f} MiB, more than the {m.limit // MiB} MiB a {m.name} may be"
    try:
        m.check(path)
    except Unusable as exc:
        return exc.why
    except Exception as exc:  # noqa: BLE001  whatever the content makes the reader do: unusable
        return f"cannot be read ({one_line(exc)})"
    return None


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        while chunk := fh.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _sqlite_copy(src: Path, out: Path) -> None:
    """The database at `src` as one self-contained file at `out` (its write-ahead log folded in)."""
    source = sqlite3.connect(f"{src.resolve().as_uri()}?mode=ro", uri=True, timeout=30)
    try:
        target = sqlite3.connect(out)
        try:
            source.backup(target)
        finally:
            target.close()
    finally:
        source.close()


def _add(tar: tarfile.TarFile, name: str, fh: IO[bytes], size: int) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mtime, info.mode = size, int(time.time()), 0o644
    tar.addfile(info, fh)


def save(settings: Settings, artifact: Path) -> str:
    root = settings.root
    commit = tree.head(root)
    if commit is None:
        raise StateError("not a git checkout with a commit: the state would not say what it was made at")
    left_out: list[str] = []
    with tempfile.TemporaryDirectory(prefix="testharness-state-") as tmp:
        staged: dict[str, Path] = {}
        for m in members(settings):
            if not m.path.is_file():
                continue
            copy = Path(tmp, m.name)
            try:
                if m.sqlite:
                    _sqlite_copy(m.path, copy)
                else:
                    shutil.copyfile(m.path, copy)
            except (OSError, sqlite3.Error) as exc:
                raise StateError(f"cannot read {m.path.name} ({exc})") from None
            problem = _member_problem(m, copy)
            if problem is not None:  # a load would refuse the whole artifact for it
                left_out.append(f"{m.path.name} {problem}")
                continue
            staged[m.name] = copy
        manifest = {
            "format": FORMAT,
            "version": VERSION,
            "project": project_name(root),
            "commit": commit,
            "python": platform.python_version(),
            "environment": environment(settings),
            "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "files": sorted(staged),
            "sha256": {name: _sha256(path) for name, path in sorted(staged.items())},
        }
        with replacing(artifact) as tmp_artifact, tarfile.open(tmp_artifact, "w:gz") as tar:
            text = json.dumps(manifest, indent=2).encode()
            _add(tar, MANIFEST, io.BytesIO(text), len(text))
            for name, path in sorted(staged.items()):
                with path.open("rb") as fh:
                    _add(tar, name, fh, path.stat().st_size)
    size = artifact.stat().st_size
    what = ", ".join(sorted(staged)) or "no state files (nothing recorded yet)"
    tail = f"; left out {'; '.join(left_out)}" if left_out else ""
    return f"{PREFIX}: saved {artifact} ({size / 1024:.0f} KiB) at {commit[:12]}: {what}{tail}"


class _Capped(io.RawIOBase):
    """A stream that refuses to give more than `limit` bytes: a decompression bomb stops here,
    whatever the tar headers inside it claim."""

    def __init__(self, fh: io.BufferedIOBase, limit: int, name: str):
        self.fh, self.limit, self.left, self.name = fh, limit, limit, name

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        got = self.fh.readinto(memoryview(buffer)[: self.left + 1])
        self.left -= got
        if self.left < 0:
            raise StateError(f"{self.name} expands to more than {self.limit // MiB} MiB (the limit)")
        return got


def _manifest(data: bytes, name: str, known: set[str]) -> dict[str, Any]:
    """The manifest, its every field checked; StateError (one line) otherwise."""
    try:
        manifest = json.loads(data)
    except (ValueError, RecursionError):
        raise StateError(f"{name} has no readable {MANIFEST}") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise StateError(f"{name} is not a {FORMAT} file")
    if manifest.get("version") != VERSION:
        raise StateError(f"{name} has format version {manifest.get('version')!r}, expected {VERSION}")

    def field(key: str, ok: Callable[[Any], bool], what: str) -> None:
        if not ok(manifest.get(key)):
            raise StateError(f"{name}'s {MANIFEST} is malformed: {key!r} must be {what}")

    def str_map(value: Any, values: re.Pattern[str] | None = None) -> bool:
        return isinstance(value, dict) and all(
            isinstance(k, str) and isinstance(v, str) and (values is None or values.fullmatch(v))
            for k, v in value.items()
        )

    field("project", lambda v: isinstance(v, str), "a string")
    field("commit", lambda v: isinstance(v, str) and bool(_COMMIT.fullmatch(v)), "a full commit id (40 hex digits)")
    field("python", lambda v: isinstance(v, str), "a string")
    field("created_at", lambda v: isinstance(v, str), "a string")
    field("environment", str_map, "an object of paths and digests")
    field("files", lambda v: _names(v, known), "a list of its members")
    field("sha256", lambda v: str_map(v, _SHA256) and set(v) == set(manifest["files"]), "a digest of each member")
    return manifest


def _names(value: Any, known: set[str]) -> bool:
    """Whether `value` is a list of different names, each one `known`."""
    return (
        isinstance(value, list)
        and all(isinstance(x, str) and x in known for x in value)
        and len(set(value)) == len(value)
    )


def _fits(settings: Settings, manifest: dict[str, Any], now: dict[str, str]) -> None:
    root = settings.root
    if manifest["project"] != project_name(root):
        raise StateError(f"it was made for the project {manifest['project']!r}, this is {project_name(root)!r}")
    commit = manifest["commit"]
    if not tree.is_ancestor(root, commit):
        raise StateError(
            f"its commit {commit[:12]} is not an ancestor of HEAD (fetch it, or save a state on the base branch)"
        )
    made = manifest["environment"]
    for rel in sorted(set(made) | set(now)):
        if made.get(rel) != now.get(rel):
            raise StateError(f"it was made under another {rel}")


def _copy_out(src: IO[bytes], out: Path) -> str:
    """Stream `src` to `out`; its sha256 digest."""
    digest = hashlib.sha256()
    with out.open("wb") as fh:
        while chunk := src.read(_CHUNK):
            digest.update(chunk)
            fh.write(chunk)
    return digest.hexdigest()


def _unpack(settings: Settings, artifact: Path, staging: Path) -> tuple[dict[str, Any], dict[str, Path]]:
    """The manifest and the members, staged in `staging`, each checked (see the module's
    docstring); StateError (one line) at the first thing that is wrong."""
    by_name = {m.name: m for m in members(settings)}
    now = environment(settings)  # (reads the checkout: its errors are not the artifact's)
    name = artifact.name
    staged: dict[str, Path] = {}
    try:
        with (
            gzip.open(artifact, "rb") as raw,
            tarfile.open(fileobj=io.BufferedReader(_Capped(raw, TOTAL_LIMIT, name)), mode="r|") as tar,
        ):
            first = tar.next()
            if first is None or first.name != MANIFEST or not first.isfile() or first.size > MANIFEST_LIMIT:
                raise StateError(f"{name} does not start with its {MANIFEST}")
            manifest = _manifest(_read(tar, first).read(), name, set(by_name))
            _fits(settings, manifest, now)  # before the members are read: the cheap refusals first
            while (info := tar.next()) is not None:  # (iterating would start again at the manifest)
                if info.name not in manifest["files"] or info.name in staged or not info.isfile():
                    raise StateError(f"{name} holds an unexpected entry {info.name!r}")
                m = by_name[info.name]
                if info.size > m.limit:
                    raise StateError(
                        f"its {m.name} is {info.size / MiB:.0f} MiB, more than the {m.limit // MiB} MiB limit"
                    )
                staged[m.name] = staging / m.name
                if _copy_out(_read(tar, info), staged[m.name]) != manifest["sha256"][m.name]:
                    raise StateError(f"its {m.name} does not match the sha256 digest in its {MANIFEST}")
    except FileNotFoundError:
        raise StateError(f"{artifact} does not exist") from None
    except (tarfile.TarError, EOFError, OSError, zlib.error) as exc:
        raise StateError(f"{name} is damaged ({one_line(exc)})") from None
    missing = sorted(set(manifest["files"]) - set(staged))
    if missing:
        raise StateError(f"{name} lacks its {missing[0]}, which its {MANIFEST} lists")
    for member_name, path in staged.items():
        problem = _member_problem(by_name[member_name], path)
        if problem is not None:
            raise StateError(f"its {member_name} {problem}")
    return manifest, staged


def _read(tar: tarfile.TarFile, info: tarfile.TarInfo) -> IO[bytes]:
    fh = tar.extractfile(info)
    assert fh is not None  # (a regular file's)
    return fh


def _targets(m: Member) -> list[Path]:
    """The member's file in the checkout, and the side files SQLite keeps beside it."""
    return [m.path.with_name(m.path.name + suffix) for suffix in ("", *(SQLITE_SIDE_FILES if m.sqlite else ()))]


def _clear(settings: Settings) -> list[str]:
    """Remove the checkout's selection files; what could not be removed. A directory is left
    where it is: the run that finds it moves it aside (or, named by $TESTMON_DATAFILE, stops)."""
    failed: list[str] = []
    for m in members(settings):
        for path in _targets(m):
            if os.path.lexists(path) and not path.is_dir():
                try:
                    path.unlink()
                except OSError as exc:
                    failed.append(f"{shown(path, settings.root)} ({exc.strerror or exc})")
    return failed


def _swap_in(settings: Settings, staged: dict[str, Path]) -> None:
    """Replace the checkout's selection files with the staged ones, all of them."""
    for m in members(settings):
        for path in _targets(m):
            if path.is_dir():
                raise StateError(f"{shown(path, settings.root)} is a directory, not a file")
    failed = _clear(settings)
    if failed:
        raise StateError(f"could not remove {failed[0]}")
    for m in members(settings):
        if m.name in staged:
            try:
                with replacing(m.path) as tmp:
                    shutil.copyfile(staged[m.name], tmp)
            except OSError as exc:
                raise StateError(f"could not write {shown(m.path, settings.root)} ({exc.strerror or exc})") from None


def load(settings: Settings, artifact: Path) -> str:
    try:
        with tempfile.TemporaryDirectory(prefix="testharness-state-") as tmp:
            manifest, staged = _unpack(settings, artifact, Path(tmp))
            _swap_in(settings, staged)
    except Exception as exc:  # noqa: BLE001  (git, the disk, a bug too): refusing must never fail CI
        why = str(exc) if isinstance(exc, StateError) else f"it could not be loaded ({one_line(exc)})"
        failed = _clear(settings)  # nothing stale, nothing half loaded: everything runs
        tail = f"; could not remove {', '.join(failed)}: remove it by hand" if failed else ""
        return f"{PREFIX}: not loaded, everything runs: {why}{tail}"
    commit = str(manifest["commit"])
    behind = tree.commits_between(settings.root, commit)
    return (
        f"{PREFIX}: loaded {artifact.name}, made at {commit[:12]} ({behind} commit(s) behind HEAD): "
        f"selection runs what changed since then ({', '.join(sorted(staged)) or 'no state files'})"
    )


def add_arguments(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    save_p = actions.add_parser("save", help="write the selection state of this checkout to FILE")
    save_p.add_argument("file", type=Path)
    load_p = actions.add_parser("load", help="restore the selection state in FILE into this checkout")
    load_p.add_argument("file", type=Path)


def run(args: argparse.Namespace) -> int:
    try:
        settings = load_settings(find_project_root(Path.cwd()))
    except SettingsError as exc:
        print(f"{PREFIX}: error: {exc}", file=sys.stderr)
        return 2
    if args.action == "load":
        print(load(settings, args.file))
        return 0
    try:
        print(save(settings, args.file))
    except (StateError, tree.TreeError) as exc:
        print(f"{PREFIX}: error: {exc}", file=sys.stderr)
        return 1
    return 0
