"""The one writer of the run's record files: `unit_results.json` and its dated copy in
`unit_results/` (pure: no pytest, no Ray). Both or neither: what cannot be written is one
`ResultsWriteError` line naming the file and why, and no file claims a record the run could
not complete. Called by testharness.record (a session's record: written, its exit status
amended, the previous run's removed) and by run_unit's supervisor (its verdict on a finished
session's record; a round's record discarded before a rerun round writes the run's one record).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from datetime import datetime
from pathlib import Path
from typing import Any

from testharness.atomic_io import hidden_temp_beside, json_text, write_new_file, write_text_atomic
from testharness.results import DATED_DIR, RESULTS_NAME, ResultsWriteError

DATED_FORMAT = "%Y%m%d_%H%M%S"


def write_json_new(directory: Path, stem: str, data: dict[str, Any], text: str | None = None) -> Path:
    """Write `data` to `directory/stem.json`, or `stem_1.json`, ...: never replaces a file.

    os.link publishes the complete temp file under a name only if that name is free, so two
    runs started in the same second cannot overwrite each other.
    """
    directory.mkdir(parents=True, exist_ok=True)
    tmp = hidden_temp_beside(directory / f"{stem}.json")
    try:
        write_new_file(tmp, json_text(data) if text is None else text)
        n = 0
        while True:
            target = directory / (f"{stem}.json" if n == 0 else f"{stem}_{n}.json")
            try:
                os.link(tmp, target)
                return target
            except FileExistsError:
                n += 1
    finally:
        tmp.unlink(missing_ok=True)


def _write_error(exc: OSError, target: Path) -> ResultsWriteError:
    """One line naming the file that could not be written and why (a file where a directory
    should be, read-only, disk full)."""
    other = Path(exc.filename) if isinstance(exc.filename, str) else None
    if isinstance(exc, (FileExistsError, NotADirectoryError)):
        blocking = next((p for p in target.parents if p.exists() and not p.is_dir()), None)
        if blocking is not None:
            return ResultsWriteError(f"{target}: {blocking} is a file, not a directory")
    reason = exc.strerror or str(exc) or type(exc).__name__
    temp = other is not None and other.parent == target.parent and other.name.startswith(".")
    if other is not None and other != target and not temp:
        reason += f" ({other})"  # e.g. the directory that could not be made
    return ResultsWriteError(f"{target}: {reason}")


def discard(paths: Iterable[Path]) -> None:
    """Remove written record files (best effort: a failed write is what gets reported)."""
    for path in paths:
        try:
            path.unlink(missing_ok=True)
        except OSError:
            pass  # the caller reports the write that failed; nothing more can be done here


def write_results(results_dir: Path, data: dict[str, Any], start: datetime) -> tuple[Path, Path]:
    """Write `unit_results.json` and the dated copy; return both paths.

    Both or neither: when one cannot be written (read-only, disk full, a file where a
    directory should be) the other is removed again and ResultsWriteError says why in one
    line, so no file claims a record that the run could not complete."""
    latest = results_dir / RESULTS_NAME
    try:
        text = json_text(data)  # once for both files: a 1,000-test document takes tens of ms
    except (TypeError, ValueError, RecursionError) as exc:
        raise ResultsWriteError(f"the record is not JSON: {exc}") from None
    written: list[Path] = []
    target = latest
    try:
        write_text_atomic(latest, text)
        written.append(latest)
        target = results_dir / DATED_DIR / f"{start.strftime(DATED_FORMAT)}.json"
        dated = write_json_new(target.parent, start.strftime(DATED_FORMAT), data, text)
    except OSError as exc:
        discard(written)
        raise _write_error(exc, target) from None
    return latest, dated


def rewrite_results(paths: Iterable[Path], data: dict[str, Any]) -> None:
    """Replace already written results files (the latest and its dated copy) with `data`;
    when that fails they are removed (they would hold a record the run no longer stands by)
    and ResultsWriteError says why."""
    paths = list(paths)
    target = paths[0] if paths else Path(RESULTS_NAME)
    try:
        text = json_text(data)
        for target in paths:
            write_text_atomic(target, text)
    except OSError as exc:
        discard(paths)
        raise _write_error(exc, target) from None
    except (TypeError, ValueError, RecursionError) as exc:
        discard(paths)
        raise ResultsWriteError(f"the record is not JSON: {exc}") from None


def own_files(latest: Path | None, dated: Path) -> tuple[str, list[Path]]:
    """A run's record, read from its own dated copy (a name no other run takes), and the files
    that hold it: that copy, and the latest `unit_results.json` while it is still this run's
    (two runs in one checkout: the one that ended last owns it). OSError when the copy cannot
    be read."""
    text = dated.read_text(encoding="utf-8")
    files = [dated]
    if latest is not None:
        try:
            if latest.read_text(encoding="utf-8") == text:  # both written from one text
                files.insert(0, latest)
        except OSError:
            pass  # gone, or replaced by a directory: not this run's any more
    return text, files


def amend_written(latest: Path | None, dated: Path, status: int) -> bool:
    """Set `exit_status` in the files of a finished session's record (run_unit's verdict on it:
    `own_files`, never another run's), where it says another; whether they were rewritten.
    OSError, ValueError or ResultsWriteError when they cannot be read or rewritten."""
    text, files = own_files(latest, dated)
    document = json.loads(text)
    if document.get("exit_status") == status:
        return False
    document["exit_status"] = status
    rewrite_results(files, document)
    return True


def remove_previous(results_dir: Path) -> str | None:
    """Remove the previous run's `unit_results.json` as a run starts (upstream NeMo RL does
    the same), so a run whose record cannot be written, or that is killed, never leaves an
    earlier record looking like its own. None when no such file is left, else why it stays."""
    path = results_dir / RESULTS_NAME
    try:
        path.unlink()
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as exc:
        return str(_write_error(exc, path))
    return None
