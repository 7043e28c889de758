"""The selection-state artifact's format, and the checks a load makes before it trusts one
(no pytest, no git: `testharness state`, selection_state.py, is its command).

A gzipped tar: `manifest.json` first, then each member under its fixed name. Reading one
never trusts it: the decompressed stream is capped (a decompression bomb stops at
TOTAL_LIMIT, whatever the tar headers inside claim), each member's header is checked against
its limit before a byte of it is read, every manifest field is checked, each member is
streamed to a staging directory and its sha256 digest compared with the manifest's, and
then its owner's own check runs on it (Member.check). Nothing is extracted by a path the
archive names.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import re
import tarfile
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from testharness.atomic_io import replacing
from testharness.state_files import Unusable, one_line

FORMAT = "testharness.selection_state"
VERSION = 2  # 2: the members' sha256 digests in the manifest
MANIFEST = "manifest.json"
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


def member_problem(m: Member, path: Path) -> str | None:
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


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        while chunk := fh.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _add(tar: tarfile.TarFile, name: str, fh: IO[bytes], size: int) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mtime, info.mode = size, int(time.time()), 0o644
    tar.addfile(info, fh)


def write(artifact: Path, manifest: dict[str, Any], staged: dict[str, Path]) -> None:
    """The artifact: the manifest first, then the staged members under their names."""
    with replacing(artifact) as tmp, tarfile.open(tmp, "w:gz") as tar:
        text = json.dumps(manifest, indent=2).encode()
        _add(tar, MANIFEST, io.BytesIO(text), len(text))
        for name, path in sorted(staged.items()):
            with path.open("rb") as fh:
                _add(tar, name, fh, path.stat().st_size)


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


def _copy_out(src: IO[bytes], out: Path) -> str:
    """Stream `src` to `out`; its sha256 digest."""
    digest = hashlib.sha256()
    with out.open("wb") as fh:
        while chunk := src.read(_CHUNK):
            digest.update(chunk)
            fh.write(chunk)
    return digest.hexdigest()


def unpack(
    artifact: Path, by_name: dict[str, Member], staging: Path, accept: Callable[[dict[str, Any]], None]
) -> tuple[dict[str, Any], dict[str, Path]]:
    """The manifest and the members (`by_name`: those a manifest may list), staged in
    `staging`, each checked (see the module's docstring); `accept` judges the manifest before
    any member is read (the cheap refusals first). StateError (one line) at the first thing
    that is wrong."""
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
            accept(manifest)
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
        problem = member_problem(by_name[member_name], path)
        if problem is not None:
            raise StateError(f"its {member_name} {problem}")
    return manifest, staged


def _read(tar: tarfile.TarFile, info: tarfile.TarInfo) -> IO[bytes]:
    fh = tar.extractfile(info)
    assert fh is not None  # (a regular file's)
    return fh
