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

import os
from collections.abc import Iterable
from pathlib import Path

from testharness.metrics import test_files_under


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
    paths = [invocation_dir / arg.split("::", 1)[0] for arg in args]
    if not all(path.exists() for path in paths):
        return None
    return test_files_under(paths, rootdir, patterns, norecurse) - skip


def workers_for(requested: int, files: int) -> int:
    """Workers to start: no more than the files to run (loadfile hands out whole files)."""
    return max(0, min(requested, files))


def gave_dist(args: Iterable[str]) -> bool:
    """Whether the command line (with PYTEST_ADDOPTS) chose a --dist mode."""
    return any(a == "-d" or a.startswith("--dist") for a in args)
