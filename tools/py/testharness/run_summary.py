"""The run summary: what run_unit reads to word its last line and reconcile its exit code
(the file named by TESTHARNESS_SUMMARY_FILE, which run_unit's supervisor sets, taken only by the
pytest bound to its run: testharness.run_binding; nothing is written without it). Its one
writer is the recorder, at the session's end and whenever the
record's fate changes after it.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from testharness.atomic_io import write_json_atomic

if TYPE_CHECKING:
    from testharness.record import Record


def write(session: pytest.Session, st: Record, path: Path | None) -> None:
    """What run_unit reads to word its last line, into `path` (None: no summary is asked for)."""
    if path is None:
        return
    summary = {
        "exit_status": int(session.exitstatus),
        "tests_exit_status": int(session.exitstatus) if st.tests_status is None else st.tests_status,
        "collected": session.testscollected,
        "deselected": st.deselected,
        "results": str(st.paths[0]) if st.paths else None,
        "results_copy": str(st.paths[1]) if st.paths else None,
        "results_error": st.write_error or None,
        "stopped": st.stopped,
        "collection_errors": {nodeid: rec.error for nodeid, rec in st.tests.items() if rec.error is not None},
        "module_skips": dict(st.skipped_files),
    }
    _write(path, summary)


def write_before_collection(st: Record, status: int, line: str, path: Path | None) -> None:
    """pytest ended before its session (a conftest.py that does not import): why, and its record."""
    if path is not None:
        _write(path, {"exit_status": status, "before_collection": line, "collected": 0,
                      "results": str(st.paths[0]) if st.paths else None,
                      "results_copy": str(st.paths[1]) if st.paths else None,
                      "results_error": st.write_error or None, "tests_exit_status": st.tests_status})  # fmt: skip


def _write(path: Path, summary: dict[str, Any]) -> None:
    try:
        write_json_atomic(path, summary)
    except OSError as exc:  # run_unit then words its line from the exit status alone
        print(f"testharness: could not write the run summary {path}: {exc}", file=sys.stderr)


def stop_cause(exc: BaseException) -> dict[str, str]:
    """What ended the session early, for run_unit's last line: `by` is "signal" (a stop signal
    sent to pytest itself), "collection" (errors during collection), "pytest" (pytest or a
    plugin stopped the run: --sw after a failure, xdist's --maxfail), "exit" (pytest.exit) or
    "KeyboardInterrupt" (raised by a test or a plugin); `reason` is pytest's words."""
    reason = str(exc)
    if isinstance(exc, pytest.exit.Exception):
        return {"by": "exit", "reason": exc.msg}
    if type(exc).__module__ == "testharness.interrupts":
        return {"by": "signal", "reason": reason}
    if type(exc) is KeyboardInterrupt:
        return {"by": "KeyboardInterrupt", "reason": reason}
    if re.fullmatch(r"\d+ errors? during collection", reason):
        return {"by": "collection", "reason": reason}
    return {"by": "pytest", "reason": reason}  # pytest's Interrupted(session.shouldstop), xdist's
