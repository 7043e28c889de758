"""The selector's universe of files and their content digests (pure: no pytest, no Ray).

The universe is every Python file of the source packages, the test roots, and the
conftest.py files above the test roots; a file's digest is of its content, never its mtime,
and a file whose stat signature did not change is not read again (`hash_files`).
"""

from __future__ import annotations

import fnmatch
import hashlib
import os
import time
from collections.abc import Mapping

from .config import SelectConfig

_SKIP_DIRS = {"__pycache__", "node_modules", "site-packages"}


def digest_bytes(data: bytes) -> str:
    """Content digest of a file (never an mtime: `touch` and moved checkouts change nothing)."""
    return hashlib.blake2b(data, digest_size=12).hexdigest()


def _walk_py(root: str, rel: str, out: dict[str, str]) -> None:
    """Add `rel`'s .py files (recursively) to out as rel_path -> absolute path."""
    base = os.path.join(root, rel) if rel else root
    try:
        entries = list(os.scandir(base))
    except (FileNotFoundError, NotADirectoryError, PermissionError):
        return
    for entry in entries:
        name = entry.name
        if name.startswith(".") or name in _SKIP_DIRS:
            continue
        child = f"{rel}/{name}" if rel else name
        try:
            if entry.is_dir(follow_symlinks=False):
                _walk_py(root, child, out)
            elif name.endswith(".py") and entry.is_file():
                out[child] = entry.path
        except OSError:
            continue


def scan_files(root: str, cfg: SelectConfig) -> dict[str, str]:
    """Every Python file of the graph's universe: rel POSIX path -> absolute path.

    The universe is the source packages (under each source root), the test roots, and the
    conftest.py files above the test roots (pytest loads them too).
    """
    out: dict[str, str] = {}
    for src in cfg.source_roots:
        for pkg in cfg.source_packages:
            rel = f"{src}/{pkg}" if src else pkg
            _walk_py(root, rel, out)
            single = os.path.join(root, rel + ".py")
            if os.path.isfile(single):
                out[rel + ".py"] = single
    for test_root in cfg.test_roots:
        full = os.path.join(root, test_root) if test_root else root
        if os.path.isfile(full) and full.endswith(".py"):
            out[test_root] = full
            test_root = test_root.rpartition("/")[0]
        else:
            _walk_py(root, test_root, out)
        for anc in ancestor_dirs(test_root):
            rel = f"{anc}/conftest.py" if anc else "conftest.py"
            path = os.path.join(root, rel)
            if os.path.isfile(path):
                out[rel] = path
    return out


RACY_S = 2.0  # a file written this recently may change again within its mtime's tick


def hash_files(
    files: dict[str, str],
    known: Mapping[str, tuple[str, str]] | None = None,
    stats: dict[str, str] | None = None,
    now: float | None = None,
    contents: dict[str, bytes] | None = None,
) -> dict[str, str]:
    """Content digests of the given files (rel -> digest); unreadable files are left out.

    `known`: rel -> (stat signature, digest) from an earlier run; a file whose signature
    (size, mtime, ctime, inode: any write changes ctime, which no tool can set back) is
    unchanged is not read again, as git's index does. `stats` receives each file's
    signature, except for files written within RACY_S seconds of `now` (read again next
    time). The digest is still of the content: `touch` or a moved checkout changes nothing.
    `contents` receives the bytes of each file read (absolute path -> bytes), so a file
    that must then be parsed is not read twice, and is parsed as it was hashed.
    """
    out: dict[str, str] = {}
    known = known or {}
    racy_ns = int(((time.time() if now is None else now) - RACY_S) * 1e9)
    for rel, path in files.items():
        try:
            st = os.stat(path)
        except OSError:
            continue
        sig = f"{st.st_size}:{st.st_mtime_ns}:{st.st_ctime_ns}:{st.st_ino}"
        seen = known.get(rel)
        if seen is not None and seen[0] == sig:
            out[rel] = seen[1]
        else:
            try:
                with open(path, "rb") as fh:
                    data = fh.read()
            except OSError:
                continue
            out[rel] = digest_bytes(data)
            if contents is not None:
                contents[path] = data
        if stats is not None and max(st.st_mtime_ns, st.st_ctime_ns) < racy_ns:
            stats[rel] = sig
    return out


def is_test_file(rel: str, cfg: SelectConfig) -> bool:
    """A test module pytest would collect: under a test root and matching `python_files`."""
    name = rel.rpartition("/")[2]
    if not any(fnmatch.fnmatch(name, pat) for pat in cfg.test_patterns):
        return False
    return any(not r or rel == r or rel.startswith(r + "/") for r in cfg.test_roots)


def ancestor_dirs(rel_dir: str) -> list[str]:
    """ "a/b" -> ["", "a", "a/b"]."""
    out = [""]
    if rel_dir:
        parts = rel_dir.split("/")
        out += ["/".join(parts[: i + 1]) for i in range(len(parts))]
    return out
