"""Atomic file writes: readers see the old file or the complete new one, never half of one.

`write_json_atomic` is the one JSON writer of the harness (results, metric dumps, check
reports, state files); everything else here is the plumbing it and the other writers share.

The temp file sits beside the target (same file system, so os.replace is atomic), is hidden
(dot-prefixed, so `dir/*` globs skip it) and gets the usual umask permissions (mkstemp
would force 0600 on files a user later shares or a container hands back).
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any


def hidden_temp_beside(path: Path) -> Path:
    return path.with_name(f".{path.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp")


def write_new_file(path: Path, text: str) -> None:
    """Create `path` (it must not exist) with `text`, flushed to disk."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(text)
        fh.flush()
        os.fsync(fh.fileno())


@contextmanager
def replacing(path: Path) -> Iterator[Path]:
    """Yield a temp path to write; when the block succeeds it replaces `path` in one step."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = hidden_temp_beside(path)
    try:
        yield tmp
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def write_text_atomic(path: Path, text: str) -> None:
    with replacing(path) as tmp:
        write_new_file(tmp, text)


def json_text(
    data: Any,
    *,
    allow_nan: bool = False,
    default: Callable[[Any], Any] | None = None,
    compact: bool = False,
) -> str:
    """`data` as the harness writes JSON: indented for people and jq, or `compact` (no spaces,
    sorted keys) for state files only programs read; always one trailing newline.

    `allow_nan=False` (the default) raises ValueError on NaN/Infinity, which are not JSON;
    the metric dumps pass True so a diverged run stays visible to the checks. `default`
    turns values json cannot encode into encodable ones (e.g. `repr`).
    """
    if compact:
        body = json.dumps(data, separators=(",", ":"), sort_keys=True, allow_nan=allow_nan, default=default)
    else:
        body = json.dumps(data, indent=2, allow_nan=allow_nan, default=default)
    return body + "\n"


def write_json_atomic(
    path: str | os.PathLike[str],
    data: Any,
    *,
    allow_nan: bool = False,
    default: Callable[[Any], Any] | None = None,
    compact: bool = False,
) -> None:
    """The harness's one atomic JSON writer: readers see the old file or the complete new one."""
    # Serialise first: a value json refuses must not leave a half-written temp file.
    write_text_atomic(Path(path), json_text(data, allow_nan=allow_nan, default=default, compact=compact))
