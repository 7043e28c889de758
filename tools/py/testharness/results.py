"""unit_results.json: the results schema, and the files read back (pure: no pytest, no Ray).

Schema (all keys always present): exit_status, git_commit, start_time, metrics, gpu_types,
coverage, memory_unit, memory_source, tests. A test's entry has key, outcome, duration and
attempts, plus `leaks` (a list) and `hang` (an object) only when the test leaked or timed out
(testharness.hygiene), and `crash` ({"cause", "stack"}) only when its process died in it
(testharness.supervisor), so files without them read the same. Documented in docs/unit-tests.md ("Results files").
The document is built here (`build_results`, one test's entry: `OutcomeRecord`) and written by
its one writer, testharness.record_files (through testharness.record); the history readers (shards, report) read it back as typed
`Run` records (`read_results_file`), so both sides of the schema live in this one module.
"""

from __future__ import annotations

import json
import math
import re
import subprocess
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

RESULTS_NAME = "unit_results.json"
DATED_DIR = "unit_results"
START_TIME_FORMAT = "%Y-%m-%d %H:%M:%S"
MEMORY_UNIT = "MiB"
# Where memory figures came from, least telling first: the records of several processes
# (xdist workers, a supervised run's rounds) merged keep the most telling source.
MEMORY_RANK = {"none": 0, "rss": 1, "gpu": 2}


def with_teardown_error(outcome: str) -> str:
    """A test's outcome once its teardown failed: a pass becomes an error; a failure stays one."""
    return "error" if outcome in ("passed", "xpassed", "skipped") else outcome


def more_telling(source: str, other: str) -> str:
    """Of two memory sources, the one whose figures say more (MEMORY_RANK)."""
    return other if MEMORY_RANK.get(other, 0) > MEMORY_RANK.get(source, 0) else source


def coverage_of(plugin: Any, packages: Iterable[str]) -> float | str:
    """The record's `coverage`: pytest-cov's total (its plugin object, None without it), else why not."""
    total = getattr(plugin, "cov_total", None)
    if isinstance(total, (int, float)):
        return float(total)
    if plugin is not None and getattr(plugin, "cov_controller", None) is not None:
        return "not measured: no coverage report (session interrupted, or --cov-report= empty)"
    return f"not measured: run with --cov={next(iter(packages), '<your package>')}"


DIED_COVERAGE = "not measured: the test process died"


class ResultsWriteError(OSError):
    """The results files could not be written (one-line message naming the file and why)."""


@dataclass
class OutcomeRecord:
    """One test's outcome across its attempts (pytest-rerunfailures reruns add attempts)."""

    key: str
    outcome: str = "passed"
    duration: float = 0.0
    attempts: list[str] = field(default_factory=list)
    leaks: list[dict[str, str]] = field(default_factory=list)  # hygiene: left after teardown
    hang: dict[str, Any] | None = None  # hygiene: the timeout's diagnosis
    crash: dict[str, str] | None = None  # its process died in it: {"cause", "stack"} (supervisor)
    error: str | None = None  # a file that could not be collected or imported: pytest's error, one line

    def as_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "key": self.key,
            "outcome": self.outcome,
            "duration": round(self.duration, 6),
            "attempts": list(self.attempts),
        }
        if self.leaks:
            out["leaks"] = list(self.leaks)
        if self.hang is not None:
            out["hang"] = self.hang
        if self.crash is not None:
            out["crash"] = self.crash
        if self.error is not None:
            out["error"] = self.error
        return out

    @classmethod
    def from_json(cls, entry: Mapping[str, Any]) -> OutcomeRecord:
        """An entry as `as_json` wrote it (a supervised run's earlier rounds hand theirs on)."""
        duration = finite_number(entry.get("duration"))
        hang, crash, leaks = entry.get("hang"), entry.get("crash"), entry.get("leaks")
        return cls(
            key=str(entry.get("key", "")),
            outcome=str(entry.get("outcome", "unknown")),
            duration=duration if duration is not None else 0.0,
            attempts=[str(a) for a in entry.get("attempts", []) if isinstance(a, str)],
            leaks=[x for x in map(_leak, leaks) if x] if isinstance(leaks, list) else [],
            hang=hang if isinstance(hang, dict) else None,
            crash={k: str(v) for k, v in crash.items()} if isinstance(crash, dict) else None,
            error=str(entry["error"]) if entry.get("error") is not None else None,
        )


def error_line(longrepr: str) -> str:
    """pytest's report of a file it could not collect, in one line: its last `E   ` line (the
    exception), else its last line."""
    lines = [line.strip() for line in longrepr.splitlines() if line.strip()]
    raised = [line.removeprefix("E").strip() for line in lines if line.startswith("E ")]
    return (raised or lines or ["(no message)"])[-1]


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
    shard: str | None = None,
) -> dict[str, Any]:
    """The results document, keys in the documented order (`shard`, "I/N", only for a shard run)."""
    cov: float | str = coverage
    if isinstance(coverage, float) and not math.isfinite(coverage):
        cov = "not measured: coverage total was not a number"
    document = {
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
    if shard is not None:
        document["shard"] = shard
    return document


# --------------------------------------------------------------------------- reading


_SHA_RE = re.compile(r"^[0-9a-f]{7,40}$")


class ResultsFileError(ValueError):
    """A file that cannot be read as a results document (the message is one line)."""


@dataclass(frozen=True)
class TestRecord:
    """One test of one run, as written in the results file's "tests" section."""

    __test__ = False  # a record, not a pytest test class

    nodeid: str
    key: str
    outcome: str
    duration: float | None
    attempts: tuple[str, ...]
    leaks: tuple[Mapping[str, str], ...] = ()  # {"kind", "what", "detail"[, "owner"]}
    hang: Mapping[str, Any] | None = None  # {"timeout_s", "reason", "stuck", "stacks"}
    crash: Mapping[str, str] | None = None  # {"cause", "stack"}: its process died in it
    error: str | None = None  # a file that could not be collected (or a conftest.py imported): pytest's error


@dataclass(frozen=True)
class Run:
    """One results file, read back."""

    path: Path
    start_time: str
    started: datetime | None  # None when start_time does not parse; sorted by file name then
    git_commit: str
    exit_status: int | None
    metrics: Mapping[str, Mapping[str, Any]]
    tests: Mapping[str, TestRecord]
    gpu_types: tuple[str, ...] = ()
    coverage: float | str | None = None
    shard: str | None = None  # "I/N" when the run was one shard of N

    @property
    def short_commit(self) -> str:
        """The commit as people read it: 7 hex digits, or the raw text when it is not a sha."""
        return self.git_commit[:7] if has_real_commit(self) else self.git_commit

    def label(self) -> str:
        """`<short commit> <start time>`: how a run is named in tables and charts."""
        return f"{self.short_commit} {self.start_time}"


def has_real_commit(run: Run) -> bool:
    """True when the run names a git sha (not e.g. "unknown (not a git checkout)")."""
    return bool(_SHA_RE.match(run.git_commit))


def finite_number(value: Any) -> float | None:
    """`value` as a float when it is a finite int or float, else None (strings, lists, NaN)."""
    # bool is an int in Python, but True is neither a duration nor a metric value.
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
        duration = finite_number(entry.get("duration"))
        leaks = entry.get("leaks")
        hang, crash = entry.get("hang"), entry.get("crash")
        tests[nodeid] = TestRecord(
            nodeid=nodeid,
            key=str(entry.get("key", nodeid)),
            outcome=outcome if isinstance(outcome, str) else "unknown",
            duration=duration if duration is not None and duration >= 0 else None,
            attempts=tuple(a for a in attempts if isinstance(a, str)) if isinstance(attempts, list) else (),
            leaks=tuple(_leak(x) for x in leaks if _leak(x)) if isinstance(leaks, list) else (),
            hang=hang if isinstance(hang, dict) else None,
            crash={k: str(v) for k, v in crash.items()} if isinstance(crash, dict) else None,
            error=str(entry["error"]) if entry.get("error") is not None else None,
        )

    return tests


def _leak(entry: Any) -> dict[str, str]:
    """A leak entry with its string fields, or {} when it is not one."""
    if not isinstance(entry, dict) or not all(isinstance(entry.get(k), str) for k in ("kind", "what", "detail")):
        return {}
    return {k: v for k, v in entry.items() if k in ("kind", "what", "detail", "owner") and isinstance(v, str)}


def parse_results(path: Path, data: Any) -> Run:
    """A Run from a decoded results document; ResultsFileError when it is not one.

    Lenient inside a document: a bad field or test entry becomes "unknown"/None, so one
    odd value never costs the whole run.
    """
    if not isinstance(data, dict):
        raise ResultsFileError("top level is not a JSON object")
    if "metrics" not in data and "tests" not in data:
        raise ResultsFileError('neither "metrics" nor "tests" present: not a results file')
    start_time = data.get("start_time")
    started: datetime | None = None
    if isinstance(start_time, str):
        try:
            started = datetime.strptime(start_time, START_TIME_FORMAT)
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
        shard=data["shard"] if isinstance(data.get("shard"), str) else None,
    )


def read_results_file(path: Path) -> Run:
    """Read one results file; ResultsFileError with a one-line reason when it cannot be used."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise ResultsFileError(f"cannot read it ({exc.__class__.__name__}: {exc})") from None
    except json.JSONDecodeError as exc:
        raise ResultsFileError(f"not valid JSON ({exc.msg} at line {exc.lineno})") from None
    return parse_results(path, data)
