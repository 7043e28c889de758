"""Load the dated results files (`<results_dir>/unit_results/*.json`) into typed records.

Pure: no pytest, no Ray. Both the shard planner and the report command read history
through here, so a malformed or half-written file is skipped the same way everywhere:
with a one-line warning, never a traceback, never losing the other runs.
"""

from __future__ import annotations

import json
import math
import os
import re
import statistics
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

#: Environment variable that overrides where the history files are read from.
HISTORY_ENV = "TESTHARNESS_HISTORY_DIR"
#: Default for `[tool.testharness] results_dir` when the key (or pyproject.toml) is absent.
DEFAULT_RESULTS_DIR = "tests/unit"
HISTORY_SUBDIR = "unit_results"

_START_TIME_FORMAT = "%Y-%m-%d %H:%M:%S"
_SHA_RE = re.compile(r"^[0-9a-f]{7,40}$")


@dataclass(frozen=True)
class TestRecord:
    """One test of one run, as written in the results file's "tests" section."""

    nodeid: str
    key: str
    outcome: str
    duration: float | None
    attempts: tuple[str, ...]


@dataclass(frozen=True)
class Run:
    """One results file."""

    path: Path
    start_time: str
    started: datetime | None  # None when start_time does not parse; sorted by file name then
    git_commit: str
    exit_status: int | None
    metrics: Mapping[str, Mapping[str, Any]]
    tests: Mapping[str, TestRecord]
    gpu_types: tuple[str, ...] = ()
    coverage: float | str | None = None

    @property
    def short_commit(self) -> str:
        """The commit as people read it: 7 hex digits, or the raw text when it is not a sha."""
        return self.git_commit[:7] if has_real_commit(self) else self.git_commit

    def label(self) -> str:
        """`<short commit> <start time>`: how a run is named in tables and charts."""
        return f"{self.short_commit} {self.start_time}"


@dataclass
class History:
    """Runs ordered oldest first, plus one warning per file that could not be used."""

    directory: Path
    runs: list[Run] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def has_real_commit(run: Run) -> bool:
    """True when the run names a git sha (not e.g. "unknown (not a git checkout)")."""
    return bool(_SHA_RE.match(run.git_commit))


def configured_results_dir(project_root: Path) -> Path:
    """`[tool.testharness] results_dir` of `project_root/pyproject.toml` (default tests/unit)."""
    value: Any = DEFAULT_RESULTS_DIR
    pyproject = project_root / "pyproject.toml"
    if pyproject.is_file():
        try:
            data = tomllib.loads(pyproject.read_text(encoding="utf-8"))
        except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError):
            data = {}  # a broken pyproject is reported by the tools that own it; use the default
        value = data.get("tool", {}).get("testharness", {}).get("results_dir", DEFAULT_RESULTS_DIR)
    if not isinstance(value, str) or not value:
        value = DEFAULT_RESULTS_DIR
    path = Path(value)
    return path if path.is_absolute() else project_root / path


def find_project_root(start: Path) -> Path:
    """The nearest directory at or above `start` holding a pyproject.toml with [tool.testharness].

    Falls back to the nearest one with any pyproject.toml, then to `start` itself, so the
    command works from a sub-directory of the project as well as from its root.
    """
    start = start.resolve()
    any_pyproject: Path | None = None
    for directory in (start, *start.parents):
        pyproject = directory / "pyproject.toml"
        if not pyproject.is_file():
            continue
        if any_pyproject is None:
            any_pyproject = directory
        try:
            if "testharness" in tomllib.loads(pyproject.read_text(encoding="utf-8")).get("tool", {}):
                return directory
        except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError):
            continue
    return any_pyproject or start


def resolve_history_dir(
    explicit: str | os.PathLike[str] | None,
    project_root: Path,
    environ: Mapping[str, str] | None = None,
) -> Path:
    """Where history lives: explicit option, else $TESTHARNESS_HISTORY_DIR, else the config."""
    env = os.environ if environ is None else environ
    if explicit:
        return Path(explicit)
    if env.get(HISTORY_ENV):
        return Path(env[HISTORY_ENV])
    return configured_results_dir(project_root) / HISTORY_SUBDIR


def _as_float(value: Any) -> float | None:
    # bool is an int in Python, but True is not a duration.
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    number = float(value)
    return number if math.isfinite(number) else None


def _parse_tests(raw: Any) -> dict[str, TestRecord]:
    tests: dict[str, TestRecord] = {}
    if not isinstance(raw, dict):
        return tests
    for nodeid, entry in raw.items():
        if not isinstance(nodeid, str) or not isinstance(entry, dict):
            continue  # one bad entry should not cost the whole run
        attempts = entry.get("attempts")
        outcome = entry.get("outcome")
        duration = _as_float(entry.get("duration"))
        tests[nodeid] = TestRecord(
            nodeid=nodeid,
            key=str(entry.get("key", nodeid)),
            outcome=outcome if isinstance(outcome, str) else "unknown",
            duration=duration if duration is not None and duration >= 0 else None,
            attempts=tuple(a for a in attempts if isinstance(a, str)) if isinstance(attempts, list) else (),
        )
    return tests


def parse_run(path: Path, data: Any) -> Run:
    """Build a Run from a decoded results file; ValueError (one line) when it is not one."""
    if not isinstance(data, dict):
        raise ValueError("top level is not a JSON object")  # noqa: TRY004 (a bad file, not a bad call)
    if "metrics" not in data and "tests" not in data:
        raise ValueError('neither "metrics" nor "tests" present: not a results file')
    start_time = data.get("start_time")
    started: datetime | None = None
    if isinstance(start_time, str):
        try:
            started = datetime.strptime(start_time, _START_TIME_FORMAT)
        except ValueError:
            started = None
    else:
        start_time = ""
    metrics_raw = data.get("metrics")
    metrics: dict[str, dict[str, Any]] = {}
    if isinstance(metrics_raw, dict):
        metrics = {k: dict(v) for k, v in metrics_raw.items() if isinstance(k, str) and isinstance(v, dict)}
    exit_status = data.get("exit_status")
    gpu_types = data.get("gpu_types")
    coverage = data.get("coverage")
    return Run(
        path=path,
        start_time=start_time,
        started=started,
        git_commit=str(data.get("git_commit", "unknown")),
        exit_status=exit_status if isinstance(exit_status, int) and not isinstance(exit_status, bool) else None,
        metrics=metrics,
        tests=_parse_tests(data.get("tests")),
        gpu_types=tuple(str(g) for g in gpu_types) if isinstance(gpu_types, list) else (),
        coverage=coverage if isinstance(coverage, (int, float, str)) and not isinstance(coverage, bool) else None,
    )


def _sort_key(run: Run) -> tuple[int, str, str]:
    # Runs with a parseable start time sort by it; the file name breaks ties (and orders the
    # rest), so every machine given the same files sees the same order.
    stamp = run.started.strftime(_START_TIME_FORMAT) if run.started else ""
    return (0 if run.started else 1, stamp, run.path.name)


def load_history(directory: Path, last: int | None = None) -> History:
    """Read every `*.json` in `directory`, oldest first; keep only the `last` runs if given.

    A missing directory is an empty history (first run ever), not an error.
    """
    history = History(directory=directory)
    if not directory.is_dir():
        return history
    runs: list[Run] = []
    for path in sorted(directory.glob("*.json")):
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            run = parse_run(path, data)
            if run.tests or run.metrics:  # a run that executed no test says nothing about any
                runs.append(run)
        except (OSError, UnicodeDecodeError) as exc:
            history.warnings.append(f"skipped {path}: cannot read it ({exc.__class__.__name__}: {exc})")
        except json.JSONDecodeError as exc:
            history.warnings.append(f"skipped {path}: not valid JSON ({exc.msg} at line {exc.lineno})")
        except ValueError as exc:
            history.warnings.append(f"skipped {path}: {exc}")
    runs.sort(key=_sort_key)
    if last is not None and last > 0:
        runs = runs[-last:]
    history.runs = runs
    return history


def recorded_durations(runs: Iterable[Run], window: int = 5) -> dict[str, float]:
    """Per nodeid, the median duration over its last `window` recorded runs.

    The median of a few recent runs follows real changes within a few runs while one slow
    outlier (a cold cache, a busy machine) does not move a test to another shard.
    """
    per_test: dict[str, list[float]] = {}
    for run in runs:  # oldest first, so the tail of each list is the most recent
        for nodeid, record in run.tests.items():
            if record.duration is not None:
                per_test.setdefault(nodeid, []).append(record.duration)
    return {nodeid: statistics.median(values[-window:]) for nodeid, values in per_test.items()}
