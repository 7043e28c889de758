"""The repository's files as git sees them, and their content digests (the git adapter).

Every file git would commit counts: tracked ones and untracked ones that are not ignored.
Content digests only (never mtimes: `touch` and a fresh clone change nothing).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from testharness.remote_select.scan import digest_bytes


class TreeError(RuntimeError):
    """git cannot answer (not a checkout, an unknown revision): the message is one line."""


class UnknownRevision(TreeError):
    """A revision the user named names no commit: a usage error, not a reason to run everything."""


def _git(root: Path, *args: str) -> bytes:
    try:
        done = subprocess.run(["git", "-C", str(root), *args], capture_output=True, check=False, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise TreeError(f"git {args[0]} failed ({exc})") from None
    if done.returncode != 0:
        first = (done.stderr.decode(errors="replace").strip().splitlines() or ["no output"])[0]
        raise TreeError(f"git {args[0]}: {first}")
    return done.stdout


def _paths(out: bytes) -> list[str]:
    return [p.decode(errors="surrogateescape") for p in out.split(b"\0") if p]


def repo_files(root: Path) -> list[str]:
    """Every file git would commit, relative to `root` (its top level)."""
    return sorted(set(_paths(_git(root, "ls-files", "-z", "--cached", "--others", "--exclude-standard"))))


def snapshot(root: Path) -> dict[str, str]:
    """{path: content digest} of every file git would commit (deleted tracked files left out)."""
    out: dict[str, str] = {}
    for rel in repo_files(root):
        path = root / rel
        if path.is_file() and not path.is_symlink():
            try:
                out[rel] = digest_bytes(path.read_bytes())
            except OSError:
                continue
        elif path.is_symlink():
            out[rel] = digest_bytes(os.readlink(path).encode())
    return out


def head(root: Path) -> str | None:
    try:
        return _git(root, "rev-parse", "--verify", "-q", "HEAD").decode().strip() or None
    except TreeError:
        return None


def resolve(root: Path, ref: str) -> str:
    """The commit `ref` names; TreeError when it names none."""
    if ref.startswith("-"):
        raise UnknownRevision(f"{ref!r} is not a revision")
    try:
        return _git(root, "rev-parse", "--verify", "-q", f"{ref}^{{commit}}").decode().strip()
    except TreeError:
        raise UnknownRevision(f"{ref!r} names no commit of this repository") from None


def changed_since(root: Path, commit: str) -> list[str]:
    """Files that differ between `commit` and the working tree, untracked ones included."""
    changed = _paths(_git(root, "diff", "--name-only", "--relative", "--no-renames", "-z", commit, "--"))
    untracked = _paths(_git(root, "ls-files", "-z", "--others", "--exclude-standard"))
    return sorted(set(changed) | set(untracked))


def content_at(root: Path, commit: str, rel: str) -> bytes | None:
    """`rel`'s content at `commit` (None when it did not exist there)."""
    try:
        return _git(root, "show", f"{commit}:./{rel}")
    except TreeError:
        return None


def is_ancestor(root: Path, commit: str, of: str = "HEAD") -> bool:
    try:
        _git(root, "merge-base", "--is-ancestor", commit, of)
    except TreeError:
        return False
    return True


def commits_between(root: Path, commit: str, of: str = "HEAD") -> int:
    """How many commits `of` has that `commit` has not."""
    try:
        return int(_git(root, "rev-list", "--count", f"{commit}..{of}").decode().strip() or 0)
    except (TreeError, ValueError):
        return 0


def restore(root: Path, commit: str, rel: str) -> None:
    """`rel` back to its content at `commit`, in the index and the working tree (TreeError if git
    cannot): a staged copy over it would otherwise be committed anyway."""
    _git(root, "restore", f"--source={commit}", "--staged", "--worktree", "--", rel)
