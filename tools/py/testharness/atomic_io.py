"""Atomic file writes: readers see the old file or the complete new one, never half of one.

The temp file sits beside the target (same file system, so os.replace is atomic), is hidden
(dot-prefixed, so `dir/*` globs skip it) and gets the usual umask permissions (mkstemp
would force 0600 on files a user later shares or a container hands back).
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


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
