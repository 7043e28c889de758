"""Metrics: how a test's metrics are named in unit_results.json, and which values a tracker
takes (pure: no pytest, no Ray).

A key is `<file stem>::<test>`, and never changes because another file was added: where test
files share a name, the one git added first keeps the short keys, the others' keys carry
their path (`path_keyed_files`), and collection warns with `clash_message`.
"""

from __future__ import annotations

import fnmatch
import json
import math
import os
import subprocess
from collections.abc import Iterable, Mapping
from pathlib import Path, PurePosixPath
from typing import Any

# Lists and dicts within one metric value: deeper values are refused where they are tracked.
# Far more than a metric needs, and well inside what every reader parses (Python's json
# recurses; jq 1.6 stops at 256 levels for the whole file).
MAX_METRIC_DEPTH = 100


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


def test_files_under(
    roots: Iterable[Path], rootdir: Path, patterns: Iterable[str], norecurse: Iterable[str] = ()
) -> set[str]:
    """Test files under `roots` (files, or directories searched for names matching `patterns`,
    e.g. pytest's python_files, skipping folders matching `norecurse`), as POSIX paths relative
    to `rootdir`: a key must not change with the tests a run selects."""
    globs, skip = list(patterns), list(norecurse)
    found: set[str] = set()
    for root in roots:
        if root.is_file():
            found.add(_relative(root, rootdir))
            continue
        for folder, dirs, files in os.walk(root):
            dirs[:] = [d for d in dirs if d != "__pycache__" and not any(fnmatch.fnmatch(d, g) for g in skip)]
            found.update(
                _relative(Path(folder) / f, rootdir)
                for f in files
                if f.endswith(".py") and any(fnmatch.fnmatch(f, g) for g in globs)
            )
    return found


def _relative(path: Path, rootdir: Path) -> str:
    """`path` relative to `rootdir` as given, else with both resolved (a symlink), else whole."""
    try:
        return path.relative_to(rootdir).as_posix()
    except ValueError:
        pass
    try:
        return path.resolve().relative_to(rootdir.resolve()).as_posix()
    except ValueError:
        return path.as_posix()


def clashing_test_files(
    rootdir: Path, collected: Iterable[str], roots: Iterable[Path], patterns: Iterable[str]
) -> dict[str, list[str]]:
    """The file names shared by test files, among the collected files and every test file under
    the test roots (so a key does not depend on what a run selects): {stem: paths}."""
    return stem_clashes({*collected, *test_files_under(roots, rootdir, patterns)})


def clash_message(
    stem: str, paths: list[str], path_keyed: frozenset[str], added: Mapping[str, float]
) -> tuple[str, str]:
    """(the file that keeps the short keys, the collection warning) for test files sharing `stem`."""
    owner = next((p for p in paths if p not in path_keyed), paths[0])
    others = [p for p in paths if p != owner]
    first = owner in added and all(added.get(p, math.inf) > added[owner] for p in others)
    long_keys = "; ".join(f"{p} gets {metric_key(p + '::', path_keyed)}<test>" for p in others)
    reason = "git added it first" if first else "the first by path: git does not tell them apart"
    return owner, (
        f"metric keys: test files share the name {stem}.py. {owner} keeps {stem}::<test> ({reason}); "
        f"{long_keys}. Rename one of them to give each file short keys of its own."
    )


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
