"""unit_results.json: the results schema, written and read here only (pure: no pytest, no Ray).

Schema (all keys always present): exit_status, git_commit, start_time, metrics, gpu_types,
coverage, memory_unit, memory_source, tests. A test's entry has key, outcome, duration and
attempts, plus `leaks` (a list) and `hang` (an object) only when the test leaked or timed out
(testharness.hygiene), and `crash` ({"cause", "stack"}) only when its process died in it
(testharness.supervisor), so files without them read the same. Documented in docs/unit-tests.md ("Results files").
The tracker writes it (`build_results`, `write_results`: both files or neither, else one
`ResultsWriteError` line; `remove_previous` at the start of a run, so a run whose record cannot
be written leaves no earlier file looking like its own); the history readers (shards,
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
    "MAX_METRIC_DEPTH",
    "MEMORY_RANK",
    "MetricError",
    "OutcomeRecord",
    "ResultsFileError",
    "ResultsWriteError",
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
    "remove_files",
    "remove_previous",
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
# Where memory figures came from, least telling first: the records of several processes
# (xdist workers, a supervised run's rounds) merged keep the most telling source.
MEMORY_RANK = {"none": 0, "rss": 1, "gpu": 2}
# Lists and dicts within one metric value: deeper values are refused where they are tracked.
# Far more than a metric needs, and well inside what every reader parses (Python's json
# recurses; jq 1.6 stops at 256 levels for the whole file).
MAX_METRIC_DEPTH = 100


class MetricError(TypeError):
    """A tracked metric that cannot go into the JSON file (message names the metric)."""


class ResultsWriteError(OSError):
    """The results files could not be written (one-line message naming the file and why)."""


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


def _where(name: str, path: tuple[Any, ...]) -> str:
    text = name + "".join(f"[{step!r}]" for step in path)
    return text if len(text) <= 120 else text[:117] + "..."


def _check_shape(name: str, value: Any) -> None:
    """MetricError unless every key of every dict in `value` is a str and lists/dicts nest at
    most MAX_METRIC_DEPTH levels without containing themselves. Walked without recursion, so
    a deep value gets this error, not a RecursionError."""
    containers = (dict, list, tuple)
    if not isinstance(value, containers):
        return
    on_path: set[int] = set()  # the containers from the top down to the one being walked
    stack: list[tuple[Any, int, tuple[Any, ...], bool]] = [(value, 1, (), False)]
    while stack:
        obj, depth, path, leaving = stack.pop()
        if leaving:
            on_path.discard(id(obj))
            continue
        if id(obj) in on_path:
            raise MetricError(
                f"metric {name!r}: the value contains itself at {_where(name, path)}: it has no JSON form"
            )
        if depth > MAX_METRIC_DEPTH:
            raise MetricError(
                f"metric {name!r}: the value nests lists/dicts more than {MAX_METRIC_DEPTH} levels deep "
                f"(at {_where(name, path)}); track a flatter value"
            )
        on_path.add(id(obj))
        stack.append((obj, depth, path, True))
        items = obj.items() if isinstance(obj, dict) else enumerate(obj)
        for key, item in items:
            if isinstance(obj, dict) and not isinstance(key, str):
                raise MetricError(
                    f"metric {name!r}: key {key!r} ({type(key).__name__}) in {_where(name, path)} is not a "
                    f"string: JSON keys are strings{_as_json_key(key)}; track str keys (e.g. str(key))"
                )
            if isinstance(item, containers):
                stack.append((item, depth + 1, (*path, key), False))


def _as_json_key(key: object) -> str:
    """How json would write `key` (and so merge it with a str key of that text)."""
    try:
        text = next(iter(json.loads(json.dumps({key: 0}))))
    except (TypeError, ValueError):
        return ""
    return f", so it would be written as {text!r}, merging with any key {text!r}"


def check_metric(name: object, value: Any) -> Any:
    """Return a JSON-safe copy of `value`, or raise MetricError naming the metric.

    Refused: values json cannot write (objects, tensors, sets, bytes), NaN and infinities,
    dict keys that are not strings (JSON would turn 1 into "1", merging it with a key "1"),
    and lists/dicts nested more than MAX_METRIC_DEPTH levels deep or containing themselves.
    """
    if not isinstance(name, str) or not name:
        raise MetricError(f"metric name must be a non-empty string, got {name!r}")
    if name.startswith("_"):
        raise MetricError(f"metric {name!r}: names starting with '_' are reserved (e.g. _elapsed)")
    _check_shape(name, value)
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
    crash: dict[str, str] | None = None  # its process died in it: {"cause", "stack"} (supervisor)

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
        )


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


def remove_files(paths: Iterable[Path]) -> None:
    """Remove what a failed write had written (best effort: the failure is what gets reported)."""
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
        remove_files(written)
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
        remove_files(paths)
        raise _write_error(exc, target) from None
    except (TypeError, ValueError, RecursionError) as exc:
        remove_files(paths)
        raise ResultsWriteError(f"the record is not JSON: {exc}") from None


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
