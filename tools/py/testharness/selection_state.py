"""`testharness state save FILE` / `load FILE`: the whole selection state as one artifact, so a
pull request's CI selects against its base branch instead of running everything.

What it holds: pytest-testmon's database (copied with SQLite's backup API: one
self-contained file, no `-wal`/`-shm`), the remote-select map, its parse cache and its
state, and the functional reach file; the manifest says which project, commit, Python and
environment (the digests of the files `[tool.testharness.functional] environment` names:
uv.lock, pyproject.toml, ...) they were made at, and the sha256 digest of each file
(state_artifact.py: the format, and the checks that do not need the checkout).

`load` restores the state only when every check passed (state_artifact.unpack) and it fits
this checkout: same project, its commit an ancestor of HEAD, the same environment files. The
members are staged in a temporary directory and copied in only then. Otherwise it removes
the checkout's own selection state, so everything runs, and says why in one line. Either way
it exits 0: CI goes on and runs what the state allows. docs/testmon.md states the trust model.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import sqlite3
import sys
import tempfile
import time
from fnmatch import fnmatchcase
from functools import partial
from pathlib import Path
from typing import Any

from testharness import state_artifact
from testharness.atomic_io import replacing
from testharness.functional import store as functional_store
from testharness.functional import tree
from testharness.project_root import find_project_root
from testharness.remote_select import store as remote_store
from testharness.remote_select.scan import digest_bytes
from testharness.settings import Settings, SettingsError, load_settings
from testharness.state_artifact import Member, StateError, member_problem, sha256_of
from testharness.state_files import SQLITE_SIDE_FILES, TESTMON_SCHEMA, Unusable, one_line, shown, sqlite_problem

TESTMON_ENV, TESTMON_DEFAULT = "TESTMON_DATAFILE", ".testmondata"  # pytest-testmon's names
DESCRIPTION = "Save the selection state (testmon, remote reach, functional reach) as one file, or load one."
PREFIX = "testharness state"


def _check_testmon(path: Path) -> None:
    problem = sqlite_problem(path, schema=TESTMON_SCHEMA, exact=True)
    if problem is not None:
        raise Unusable(problem)


def members(settings: Settings) -> list[Member]:
    root = settings.root
    testmon = Path(root, os.environ.get(TESTMON_ENV, TESTMON_DEFAULT))
    map_file = settings.remote_map_file
    return [
        Member("testmondata.sqlite", testmon, _check_testmon, state_artifact.SQLITE_LIMIT, sqlite=True),
        Member("remote_map.json", map_file, remote_store.MAP.read, state_artifact.JSON_LIMIT),
        Member(
            "remote_parse_cache.json",
            remote_store.parse_cache_file(map_file),
            remote_store.PARSE_CACHE.read,
            state_artifact.JSON_LIMIT,
        ),
        Member("remote_state.json", settings.remote_state_file, remote_store.STATE.read, state_artifact.JSON_LIMIT),
        Member(
            "functional_reach.json",
            settings.functional.reach_file,
            functional_store.REACH.read,
            state_artifact.JSON_LIMIT,
        ),
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
            problem = member_problem(m, copy)
            if problem is not None:  # a load would refuse the whole artifact for it
                left_out.append(f"{m.path.name} {problem}")
                continue
            staged[m.name] = copy
        manifest = {
            "format": state_artifact.FORMAT,
            "version": state_artifact.VERSION,
            "project": project_name(root),
            "commit": commit,
            "python": platform.python_version(),
            "environment": environment(settings),
            "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "files": sorted(staged),
            "sha256": {name: sha256_of(path) for name, path in sorted(staged.items())},
        }
        state_artifact.write(artifact, manifest, staged)
    size = artifact.stat().st_size
    what = ", ".join(sorted(staged)) or "no state files (nothing recorded yet)"
    tail = f"; left out {'; '.join(left_out)}" if left_out else ""
    return f"{PREFIX}: saved {artifact} ({size / 1024:.0f} KiB) at {commit[:12]}: {what}{tail}"


def _fits(settings: Settings, now: dict[str, str], manifest: dict[str, Any]) -> None:
    """StateError unless the state was made for this checkout: its project, an ancestor of
    HEAD, its environment files as they are `now`."""
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
            by_name = {m.name: m for m in members(settings)}
            now = environment(settings)  # (reads the checkout: its errors are not the artifact's)
            manifest, staged = state_artifact.unpack(artifact, by_name, Path(tmp), partial(_fits, settings, now))
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
