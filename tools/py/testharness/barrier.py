"""The run_first barrier of `-n` runs: under pytest-xdist no other test starts before every
selected `run_first` test has finished. A worker touches a file per finished run_first test in
the run's shared folder; the others wait for all of them (testharness.parallel)."""

from __future__ import annotations

import hashlib
import time
from pathlib import Path

RUN_FIRST_TIMEOUT_S = 3600.0  # a run_first test that never ends is the run's failure, not ours


def done_marker(shared_dir: Path, nodeid: str) -> Path:
    """The file a worker touches when the run_first test `nodeid` has finished."""
    return shared_dir / f"run_first_{hashlib.sha1(nodeid.encode()).hexdigest()[:16]}.done"


def wait_for_markers(markers: list[Path], timeout_s: float, poll_s: float = 0.2) -> list[Path]:
    """Wait until every file exists; return those still missing after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while True:
        missing = [m for m in markers if not m.exists()]
        if not missing or time.monotonic() >= deadline:
            return missing
        time.sleep(poll_s)
