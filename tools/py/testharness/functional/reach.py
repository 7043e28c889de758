"""A passing run's record, from what it measured (the coverage adapter, and a pure core).

The run leaves three things in its directory: the repository's state when it started
(`begin`: every file's digest), the coverage data of its driver and Ray workers, and the
paths its driver read (probe.py). `reach_of` keeps, for every source file that ran, the
functions whose body ran (units.py) with their digests; every other repository file read
is an input of the record, compared whole.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path

from testharness.remote_select.scan import digest_bytes

from .select import Reader, Rules
from .store import FileReach
from .units import file_units, reached_units

CHANGED_DURING_RUN = ""  # a digest no content has: the file changed while the run ran


def measured_lines(data_file: Path, root: Path) -> dict[str, set[int]]:
    """{repository path: executed lines} of a coverage data file (empty when it is absent)."""
    import coverage  # only the recorder needs it

    if not data_file.is_file():
        return {}
    data = coverage.CoverageData(basename=str(data_file))
    data.read()
    out: dict[str, set[int]] = {}
    top = root.resolve()
    for measured in data.measured_files():
        try:
            rel = Path(measured).resolve().relative_to(top).as_posix()
        except ValueError:
            continue
        out[rel] = set(data.lines(measured) or ())
    return out


def repository_paths(paths: Iterable[str], root: Path, files: Mapping[str, str]) -> set[str]:
    """The paths (absolute or relative to the cwd) that name a repository file."""
    top = root.resolve()
    out: set[str] = set()
    for p in paths:
        try:
            rel = Path(p).resolve().relative_to(top).as_posix()
        except (ValueError, OSError):
            continue
        if rel in files:
            out.add(rel)
    return out


def reach_of(
    start: Mapping[str, str], lines: Mapping[str, set[int]], read: Reader, rules: Rules
) -> dict[str, FileReach]:
    """What a passing run reached of the source files: `start` is {path: digest} when it
    started, `lines` what coverage saw run, `read` a file's content now. A file that
    changed while the run ran is recorded with digests no content has (it runs next time)."""
    reach: dict[str, FileReach] = {}
    for rel, executed in sorted(lines.items()):
        if not rules.in_source(rel) or rel not in start:
            continue
        content = read(rel)
        if content is None or digest_bytes(content) != start[rel]:
            units = reached_units(content or b"", executed)
            reach[rel] = FileReach(CHANGED_DURING_RUN, dict.fromkeys(sorted(units), CHANGED_DURING_RUN))
            continue
        now = file_units(content)
        reach[rel] = FileReach(
            now.skeleton, {q: now.units.get(q, "") for q in sorted(reached_units(content, executed))}
        )
    return reach
