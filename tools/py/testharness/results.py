"""unit_results.json: the results schema, written and read here only (pure: no pytest, no Ray).

Schema (all keys always present): exit_status, git_commit, start_time, metrics, gpu_types,
coverage, memory_unit, memory_source, tests. A test's entry has key, outcome, duration and
attempts, plus `leaks` (a list) and `hang` (an object) only when the test leaked or timed out
(testharness.hygiene), so files without them read the same. Documented in docs/unit-tests.md ("Results files").
The tracker writes it (`build_results`, `write_results`); the history readers (shards,
report) read it back as typed `Run` records (`read_results_file`), so both sides of the
schema live in this one module.
"""

from __future__ import annotations

import fnmatch
import json
import math
import os
import re
import subprocess
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path, PurePosixPath
from typing import Any

from testharness.atomic_io import (
    hidden_temp_beside,
    json_text,
    write_json_atomic,
    write_new_file,
    write_text_atomic,
)

__all__ = [  # write_json_atomic: re-exported for the tracker's summary file
    "DATED_DIR",
    "RESULTS_NAME",
    "MetricError",
    "OutcomeRecord",
    "ResultsFileError",
    "Run",
    "TestRecord",
    "build_results",
    "check_metric",
    "finite_number",
    "git_added_times",
    "git_commit",
    "has_real_commit",
    "metric_key",
    "parse_results",
    "path_keyed_files",
    "read_results_file",
    "rewrite_results",
    "stem_clashes",
    "test_files_under",
    "write_json_atomic",
    "write_json_new",
    "write_results",
]

RESULTS_NAME = "unit_results.json"
DATED_DIR = "unit_results"
START_TIME_FORMAT = "%Y-%m-%d %H:%M:%S"
DATED_FORMAT = "%Y%m%d_%H%M%S"
MEMORY_UNIT = "MiB"


class MetricError(TypeError):
    """A tracked metric that cannot go into the JSON file (message names the metric)."""


def metric_key(nodeid: str, path_keyed: frozenset[str] = frozenset()) -> str:
    """`tests/unit/x/test_a.py::TestC::test_b[p1]` -> `test_a::TestC::test_b[p1]`.

    The module part is the file stem (as in the documented `test_module::test_function`); the
    rest of the node id, parameter id included, is kept so parametrised cases never merge.
    A file in `path_keyed` (one that shares its stem with an older test file: `path_keyed_files`)
    has its path without `.py` as the module part instead (`tests/unit/b/test_x::test`).
    """
    path, sep, rest = nodeid.partition("::")
    module = PurePosixPath(path).with_suffix("").as_posix() if path in path_keyed else PurePosixPath(path).stem
    return f"{module}{sep}{rest}" if sep else module


def stem_clashes(test_files: Iterable[str]) -> dict[str, list[str]]:
    """{stem: sorted paths} for the file stems shared by two or more of `test_files`."""
    seen: dict[str, set[str]] = {}
    for path in test_files:
        seen.setdefault(PurePosixPath(path).stem, set()).add(path)
    return {stem: sorted(paths) for stem, paths in sorted(seen.items()) if len(paths) > 1}


def path_keyed_files(clashes: Mapping[str, Iterable[str]], added: Mapping[str, float]) -> frozenset[str]:
    """The files of `clashes` whose keys carry their path: all of a stem's files but the oldest.

    The oldest is the one git added first (`added`: path -> time of the commit that first
    added it; a file missing there, untracked or without git, counts as the newest), then the
    first by path. So a test file added beside an existing one of the same name never changes
    the existing file's keys: the newcomer gets the long ones."""
    keyed: set[str] = set()
    for paths in clashes.values():
        order = sorted(paths, key=lambda p: (added.get(p, math.inf), p))
        keyed.update(order[1:])
    return frozenset(keyed)


def git_added_times(root: Path, paths: Iterable[str]) -> dict[str, float]:
    """{path: commit time of the oldest commit that added it at that path}, for the `paths`
    (relative to `root`) that git knows; {} without git or outside a checkout. A shallow
    clone knows only its own commits: files it got in one commit tie (`path_keyed_files`
    then orders them by path)."""
    wanted = sorted({p for p in paths if not PurePosixPath(p).is_absolute() and ".." not in PurePosixPath(p).parts})
    if not wanted:
        return {}
    cmd = ["git", "-C", str(root), "log", "--diff-filter=A", "--no-renames", "--relative"]
    cmd += ["--format=%x00%ct", "--name-only", "--", *wanted]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.SubprocessError):
        return {}
    if proc.returncode != 0:
        return {}
    times: dict[str, float] = {}
    when: float | None = None
    for line in proc.stdout.splitlines():
        if line.startswith("\0"):
            when = float(line[1:])
        elif line and when is not None:
            times[line] = min(times.get(line, math.inf), when)
    return times


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
    leaks: list[dict[str, str]] = field(default_factory=list)  # hygiene: left after teardown
    hang: dict[str, Any] | None = None  # hygiene: the timeout's diagnosis

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
        return out


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


def write_results(results_dir: Path, data: dict[str, Any], start: datetime) -> tuple[Path, Path]:
    """Write `unit_results.json` and the dated copy; return both paths."""
    latest = results_dir / RESULTS_NAME
    text = json_text(data)  # once for both files: a 1,000-test document takes tens of ms
    write_text_atomic(latest, text)
    dated = write_json_new(results_dir / DATED_DIR, start.strftime(DATED_FORMAT), data, text)
    return latest, dated


def rewrite_results(paths: Iterable[Path], data: dict[str, Any]) -> None:
    """Replace already written results files (the latest and its dated copy) with `data`."""
    text = json_text(data)
    for path in paths:
        write_text_atomic(path, text)


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
        hang = entry.get("hang")
        tests[nodeid] = TestRecord(
            nodeid=nodeid,
            key=str(entry.get("key", nodeid)),
            outcome=outcome if isinstance(outcome, str) else "unknown",
            duration=duration if duration is not None and duration >= 0 else None,
            attempts=tuple(a for a in attempts if isinstance(a, str)) if isinstance(attempts, list) else (),
            leaks=tuple(_leak(x) for x in leaks if _leak(x)) if isinstance(leaks, list) else (),
            hang=hang if isinstance(hang, dict) else None,
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
