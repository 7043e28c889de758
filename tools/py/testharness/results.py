"""unit_results.json: building the document and writing it atomically (pure: no pytest, no Ray).

Schema (all keys always present): exit_status, git_commit, start_time, metrics, gpu_types,
coverage, memory_unit, memory_source, tests. See docs/readme/unit-tests.md.
"""

from __future__ import annotations

import fnmatch
import json
import math
import os
import subprocess
from dataclasses import dataclass, field
from datetime import datetime
from collections.abc import Iterable
from pathlib import Path, PurePosixPath
from typing import Any

from testharness.atomic_io import hidden_temp_beside, write_new_file, write_text_atomic

RESULTS_NAME = "unit_results.json"
DATED_DIR = "unit_results"
START_TIME_FORMAT = "%Y-%m-%d %H:%M:%S"
DATED_FORMAT = "%Y%m%d_%H%M%S"
MEMORY_UNIT = "MiB"


class MetricError(TypeError):
    """A tracked metric that cannot go into the JSON file (message names the metric)."""


def metric_key(nodeid: str, ambiguous_stems: frozenset[str] = frozenset()) -> str:
    """`tests/unit/x/test_a.py::TestC::test_b[p1]` -> `test_a::TestC::test_b[p1]`.

    The module part is the file stem (as in the documented `test_module::test_function`); the
    rest of the node id, parameter id included, is kept so parametrised cases never merge.
    Where two test files share a stem (`a/test_x.py`, `b/test_x.py`), the module part is the
    file's path without `.py` instead (`tests/unit/a/test_x::test`), so keys stay unique.
    """
    path, sep, rest = nodeid.partition("::")
    stem = Path(path).stem
    module = str(Path(path).with_suffix("").as_posix()) if stem in ambiguous_stems else stem
    return f"{module}{sep}{rest}" if sep else module


def ambiguous_stems(test_files: Iterable[str]) -> frozenset[str]:
    """File stems shared by two or more of `test_files` (paths as in node ids)."""
    seen: dict[str, set[str]] = {}
    for path in test_files:
        seen.setdefault(PurePosixPath(path).stem, set()).add(path)
    return frozenset(stem for stem, paths in seen.items() if len(paths) > 1)


def test_files_under(roots: Iterable[Path], rootdir: Path, patterns: Iterable[str]) -> set[str]:
    """Test files (names matching `patterns`, e.g. pytest's python_files) under `roots`, as
    POSIX paths relative to `rootdir`: a key must not change with the tests a run selects."""
    globs = list(patterns)
    found: set[str] = set()
    for root in roots:
        for path in root.rglob("*.py"):
            if any(fnmatch.fnmatch(path.name, g) for g in globs):
                try:
                    found.add(path.relative_to(rootdir).as_posix())
                except ValueError:
                    found.add(path.as_posix())
    return found


def check_metric(name: object, value: Any) -> Any:
    """Return a JSON-safe copy of `value`, or raise MetricError naming the metric."""
    if not isinstance(name, str) or not name:
        raise MetricError(f"metric name must be a non-empty string, got {name!r}")
    if name.startswith("_"):
        raise MetricError(f"metric {name!r}: names starting with '_' are reserved (e.g. _elapsed)")
    try:
        # allow_nan=False: NaN/Infinity are not JSON and would break jq on the results files.
        text = json.dumps(value, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise MetricError(
            f"metric {name!r}: value {value!r} of type {type(value).__name__} is not "
            f"JSON-serialisable ({exc}); track a plain number, string, list or dict "
            "(e.g. tensor.item())"
        ) from None
    return json.loads(text)  # a copy: later mutation by the test does not change the record


@dataclass
class OutcomeRecord:
    """One test's outcome across its attempts (pytest-rerunfailures reruns add attempts)."""

    key: str
    outcome: str = "passed"
    duration: float = 0.0
    attempts: list[str] = field(default_factory=list)

    def as_json(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "outcome": self.outcome,
            "duration": round(self.duration, 6),
            "attempts": list(self.attempts),
        }


def git_commit(root: Path) -> str:
    """HEAD's sha, or a clear note when it cannot be read."""
    try:
        proc = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return "unknown (git not available)"
    sha = proc.stdout.strip()
    if proc.returncode != 0 or len(sha) != 40:
        return "unknown (not a git checkout)"
    return sha


def build_results(
    *,
    exit_status: int,
    git_commit: str,
    start: datetime,
    metrics: dict[str, dict[str, Any]],
    gpu_types: list[str],
    coverage: float | str,
    memory_source: str,
    tests: dict[str, OutcomeRecord],
) -> dict[str, Any]:
    """The results document, keys in the documented order."""
    cov: float | str = coverage
    if isinstance(coverage, float) and not math.isfinite(coverage):
        cov = "not measured: coverage total was not a number"
    return {
        "exit_status": int(exit_status),
        "git_commit": git_commit,
        "start_time": start.strftime(START_TIME_FORMAT),
        "metrics": metrics,
        "gpu_types": sorted(set(gpu_types)),
        "coverage": cov,
        "memory_unit": MEMORY_UNIT,
        "memory_source": memory_source,
        "tests": {nodeid: rec.as_json() for nodeid, rec in tests.items()},
    }


def _dump(data: dict[str, Any]) -> str:
    return json.dumps(data, indent=2, allow_nan=False) + "\n"


def write_json_atomic(path: Path, data: dict[str, Any], text: str | None = None) -> None:
    """Write `data` to `path` so readers see either the old file or the complete new one
    (`text`: `data` already serialised by the caller)."""
    # Serialise first: a bad value must not leave a half-written temp file.
    write_text_atomic(path, _dump(data) if text is None else text)


def write_json_new(directory: Path, stem: str, data: dict[str, Any], text: str | None = None) -> Path:
    """Write `data` to `directory/stem.json`, or `stem_1.json`, ...: never replaces a file.

    os.link publishes the complete temp file under a name only if that name is free, so two
    runs started in the same second cannot overwrite each other.
    """
    directory.mkdir(parents=True, exist_ok=True)
    tmp = hidden_temp_beside(directory / f"{stem}.json")
    try:
        write_new_file(tmp, _dump(data) if text is None else text)
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


def write_results(results_dir: Path, data: dict[str, Any], start: datetime) -> tuple[Path, Path]:
    """Write `unit_results.json` and the dated copy; return both paths."""
    latest = results_dir / RESULTS_NAME
    text = _dump(data)  # once for both files: a 1,000-test document takes tens of ms
    write_json_atomic(latest, data, text)
    dated = write_json_new(results_dir / DATED_DIR, start.strftime(DATED_FORMAT), data, text)
    return latest, dated


def rewrite_results(paths: Iterable[Path], data: dict[str, Any]) -> None:
    """Replace already written results files (the latest and its dated copy) with `data`."""
    text = _dump(data)
    for path in paths:
        write_json_atomic(path, data, text)
