"""`testharness state save FILE` / `load FILE`: the whole selection state as one artifact, so a
pull request's CI selects against its base branch instead of running everything.

The artifact is a gzipped tar: `manifest.json` first, then the state files, each under a
fixed name. What it holds: pytest-testmon's database (copied with SQLite's backup API: one
self-contained file, no `-wal`/`-shm`), the remote-select map, its parse cache and its
state, and the functional reach file; the manifest says which project, commit, Python and
environment (the digests of the files `[tool.testharness.functional] environment` names:
uv.lock, pyproject.toml, ...) they were made at.

`load` restores them into a checkout when the state fits it: same project, its commit an
ancestor of HEAD, the same environment files. Otherwise it removes the checkout's own
selection state, so everything runs, and says why in one line. Either way it exits 0: CI
goes on and runs what the state allows. A file it cannot read is one line too, never a
traceback.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import platform
import sqlite3
import sys
import tarfile
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any

from testharness.atomic_io import replacing
from testharness.functional import tree
from testharness.project_root import find_project_root
from testharness.remote_select.scan import digest_bytes
from testharness.remote_select.store import parse_cache_file
from testharness.settings import Settings, SettingsError, load_settings
from testharness.state_files import SQLITE_SIDE_FILES

FORMAT = "testharness.selection_state"
VERSION = 1
MANIFEST = "manifest.json"
TESTMON_ENV, TESTMON_DEFAULT = "TESTMON_DATAFILE", ".testmondata"  # pytest-testmon's names
DESCRIPTION = "Save the selection state (testmon, remote reach, functional reach) as one file, or load one."
PREFIX = "testharness state"


class StateError(Exception):
    """Why a state artifact cannot be used here (one line)."""


@dataclass(frozen=True)
class Member:
    name: str  # inside the artifact
    path: Path  # in the checkout
    sqlite: bool = False


def members(settings: Settings) -> list[Member]:
    root = settings.root
    testmon = Path(root, os.environ.get(TESTMON_ENV, TESTMON_DEFAULT))
    return [
        Member("testmondata.sqlite", testmon, sqlite=True),
        Member("remote_map.json", settings.remote_map_file),
        Member("remote_parse_cache.json", parse_cache_file(settings.remote_map_file)),
        Member("remote_state.json", settings.remote_state_file),
        Member("functional_reach.json", settings.functional.reach_file),
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


def _sqlite_copy(src: Path) -> bytes:
    """The database at `src` as one self-contained file (its write-ahead log folded in)."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp, "copy.sqlite")
        source = sqlite3.connect(f"{src.resolve().as_uri()}?mode=ro", uri=True, timeout=30)
        try:
            target = sqlite3.connect(out)
            try:
                source.backup(target)
            finally:
                target.close()
        finally:
            source.close()
        return out.read_bytes()


def save(settings: Settings, artifact: Path) -> str:
    root = settings.root
    commit = tree.head(root)
    if commit is None:
        raise StateError("not a git checkout with a commit: the state would not say what it was made at")
    blobs: dict[str, bytes] = {}
    for m in members(settings):
        if m.path.is_file():
            try:
                blobs[m.name] = _sqlite_copy(m.path) if m.sqlite else m.path.read_bytes()
            except (OSError, sqlite3.Error) as exc:
                raise StateError(f"cannot read {m.path.name} ({exc})") from None
    manifest = {
        "format": FORMAT,
        "version": VERSION,
        "project": project_name(root),
        "commit": commit,
        "python": platform.python_version(),
        "environment": environment(settings),
        "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "files": sorted(blobs),
    }
    with replacing(artifact) as tmp, tarfile.open(tmp, "w:gz") as tar:
        for name, data in [(MANIFEST, json.dumps(manifest, indent=2).encode()), *sorted(blobs.items())]:
            info = tarfile.TarInfo(name)
            info.size, info.mtime, info.mode = len(data), int(time.time()), 0o644
            tar.addfile(info, io.BytesIO(data))
    size = artifact.stat().st_size
    what = ", ".join(blobs) or "no state files (nothing recorded yet)"
    return f"{PREFIX}: saved {artifact} ({size / 1024:.0f} KiB) at {commit[:12]}: {what}"


@contextmanager
def _opened(artifact: Path) -> Iterator[tuple[dict[str, Any], dict[str, bytes]]]:
    try:
        with tarfile.open(artifact, "r:gz") as tar:
            blobs: dict[str, bytes] = {}
            for info in tar.getmembers():
                if not info.isfile() or "/" in info.name or info.name.startswith("."):
                    raise StateError(f"{artifact.name} holds an unexpected entry {info.name!r}")
                fh = tar.extractfile(info)
                blobs[info.name] = fh.read() if fh is not None else b""
    except FileNotFoundError:
        raise StateError(f"{artifact} does not exist") from None
    except (tarfile.TarError, EOFError, OSError, ValueError) as exc:
        raise StateError(f"{artifact.name} is damaged ({exc.__class__.__name__}: {exc})") from None
    try:
        manifest = json.loads(blobs.pop(MANIFEST))
    except (KeyError, ValueError):
        raise StateError(f"{artifact.name} has no readable {MANIFEST}") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise StateError(f"{artifact.name} is not a {FORMAT} file")
    if manifest.get("version") != VERSION:
        raise StateError(f"{artifact.name} has format version {manifest.get('version')!r}, expected {VERSION}")
    yield manifest, blobs


def _fits(settings: Settings, manifest: dict[str, Any]) -> None:
    root = settings.root
    if manifest.get("project") != project_name(root):
        raise StateError(f"it was made for the project {manifest.get('project')!r}, this is {project_name(root)!r}")
    commit = str(manifest.get("commit", ""))
    if not tree.is_ancestor(root, commit):
        raise StateError(
            f"its commit {commit[:12]} is not an ancestor of HEAD (fetch it, or save a state on the base branch)"
        )
    made, now = manifest.get("environment", {}), environment(settings)
    for rel in sorted(set(made) | set(now)):
        if made.get(rel) != now.get(rel):
            raise StateError(f"it was made under another {rel}")


def _clear(settings: Settings) -> None:
    for m in members(settings):
        for suffix in ("", *(SQLITE_SIDE_FILES if m.sqlite else ())):
            side = m.path.with_name(m.path.name + suffix)
            if side.is_file() or side.is_symlink():
                side.unlink()


def load(settings: Settings, artifact: Path) -> str:
    try:
        with _opened(artifact) as (manifest, blobs):
            _fits(settings, manifest)
            _clear(settings)
            by_name = {m.name: m for m in members(settings)}
            for name, data in blobs.items():
                m = by_name.get(name)
                if m is None:
                    continue
                m.path.parent.mkdir(parents=True, exist_ok=True)
                with replacing(m.path) as tmp:
                    tmp.write_bytes(data)
    except StateError as exc:
        _clear(settings)
        return f"{PREFIX}: not loaded, everything runs: {exc}"
    commit = str(manifest["commit"])
    behind = tree.commits_between(settings.root, commit)
    return (
        f"{PREFIX}: loaded {artifact.name}, made at {commit[:12]} ({behind} commit(s) behind HEAD): "
        f"selection runs what changed since then ({', '.join(sorted(blobs)) or 'no state files'})"
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
