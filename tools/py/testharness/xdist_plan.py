"""Plan first: how many xdist workers the selected work can use, decided before any worker or
Ray cluster starts (pure: no pytest, no Ray).

Under `--dist loadfile` a worker runs whole test files, so a run needs no more workers than it
has files to run. With pytest-testmon selecting, those are the test files under the run's
paths that testmon does not skip (its deselected files: unchanged since they last passed, after
remote-aware selection took back the ones it must run); without testmon, every test file
under them. No file to run: no worker and no Ray cluster at all, the session runs in-process.

A wrong count only costs speed, never a test: a file counted that pytest then does not collect
starts a worker for nothing, and a file missed runs on the workers there are.
"""

from __future__ import annotations

import fnmatch
import os
from collections.abc import Iterable
from pathlib import Path


def _matches(name: str, patterns: Iterable[str]) -> bool:
    return any(fnmatch.fnmatch(name, p) for p in patterns)


def test_files_under(path: Path, patterns: Iterable[str], norecurse: Iterable[str]) -> list[Path]:
    """The test files pytest would look at under `path` (a file or a directory)."""
    patterns, norecurse = list(patterns), list(norecurse)
    if path.is_file():
        return [path]
    found: list[Path] = []
    for folder, dirs, files in os.walk(path):
        dirs[:] = sorted(d for d in dirs if not _matches(d, norecurse) and d != "__pycache__")
        found += [Path(folder) / f for f in sorted(files) if f.endswith(".py") and _matches(f, patterns)]
    return found


def files_to_run(
    args: Iterable[str],
    invocation_dir: Path,
    rootdir: Path,
    patterns: Iterable[str],
    norecurse: Iterable[str],
    skipped: Iterable[str] = (),
) -> set[str] | None:
    """The test files (relative to `rootdir`, POSIX) the run will collect tests from: those under
    the positional `args` (paths, or node ids `file::test`) that are not `skipped`. None when an
    argument names nothing on disk: no plan then, the run goes as asked."""
    skip = {s.replace(os.sep, "/") for s in skipped}
    files: set[str] = set()
    for arg in args:
        path = invocation_dir / arg.split("::", 1)[0]
        if not path.exists():
            return None
        for file in test_files_under(path, patterns, norecurse):
            try:
                rel = file.resolve().relative_to(rootdir.resolve()).as_posix()
            except ValueError:
                rel = file.resolve().as_posix()
            if rel not in skip:
                files.add(rel)
    return files


def workers_for(requested: int, files: int) -> int:
    """Workers to start: no more than the files to run (loadfile hands out whole files)."""
    return max(0, min(requested, files))
