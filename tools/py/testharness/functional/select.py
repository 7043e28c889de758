"""Which functional scripts an edit can affect, and why (pure: no git, no coverage).

A script runs when it has no passing record, failed at its last run, was recorded on a
machine with another GPU count or Python, or when one of the files that changed is:
  * part of the environment or of the functional harness (settings): every script runs;
  * a source file it reached, and a function it ran or the file's import-time code changed;
  * a file its driver read (an input: the script itself, the example, a config, ...);
  * a file no recorded run read, unless it matches `unrelated`: the reach cannot see what
    reads it, so every script runs.
A source file it did not reach, or a file only other scripts read, leaves it out.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import NamedTuple

from .store import PASSED, ScriptRecord
from .units import SKELETON, FileUnits, changed_units, file_units

Reader = Callable[[str], bytes | None]  # a file's content (None: it does not exist)


class Verdict(NamedTuple):
    runs: bool
    reason: str

    def line(self) -> str:
        return f"{'runs' if self.runs else 'skipped'}: {self.reason}"


@dataclass(frozen=True)
class Rules:
    source: tuple[str, ...]  # directories measured per function
    environment: tuple[str, ...] = ()
    harness: tuple[str, ...] = ()
    unrelated: tuple[str, ...] = ()

    @staticmethod
    def _matches(rel: str, globs: Iterable[str]) -> bool:
        return any(fnmatchcase(rel, g) for g in globs)

    def everything_because(self, rel: str) -> str | None:
        if self._matches(rel, self.environment):
            return f"{rel} changed"
        if self._matches(rel, self.harness):
            return f"{rel} changed (the functional harness)"
        return None

    def in_source(self, rel: str) -> bool:
        return rel.endswith(".py") and any(rel.startswith(s.rstrip("/") + "/") for s in self.source)

    def unrelated_file(self, rel: str) -> bool:
        return self._matches(rel, self.unrelated)


class Edit:
    """What changed, relative to a script's record: files and, for a reached file, functions."""

    def paths(self, record: ScriptRecord) -> Collection[str]:
        raise NotImplementedError

    def changed_in(self, record: ScriptRecord, rel: str) -> list[str] | None:
        """What changed of what `record` reached in `rel` (None: the file is gone)."""
        raise NotImplementedError


class SinceRun(Edit):
    """Against the state of the repository when each script's last passing run started."""

    def __init__(self, now: Mapping[str, str], read: Reader):
        self.now, self.read = now, read

    def paths(self, record: ScriptRecord) -> Collection[str]:
        old = record.files
        return {p for p in old.keys() | self.now.keys() if old.get(p) != self.now.get(p)}

    def changed_in(self, record: ScriptRecord, rel: str) -> list[str] | None:
        content = self.read(rel)
        if content is None:
            return None
        reach = record.reach[rel]  # the digests at the run: what the file's units were then
        return changed_units(FileUnits(reach.skeleton, reach.units), file_units(content), reach.units)


class SinceCommit(Edit):
    """Against a git revision: the files that differ from it, judged per function."""

    def __init__(self, changed: Collection[str], old: Reader, read: Reader):
        self.changed, self.old, self.read = set(changed), old, read
        self._units: dict[str, tuple[FileUnits, FileUnits] | None] = {}

    def paths(self, record: ScriptRecord) -> Collection[str]:
        return self.changed

    def changed_in(self, record: ScriptRecord, rel: str) -> list[str] | None:
        if rel not in self._units:
            before, after = self.old(rel), self.read(rel)
            self._units[rel] = None if after is None else (file_units(before or b""), file_units(after))
        pair = self._units[rel]
        if pair is None:
            return None
        return changed_units(pair[0], pair[1], record.reach[rel].units)


def judge(
    record: ScriptRecord | None,
    edit: Edit,
    rules: Rules,
    *,
    read_by_any: Collection[str],
    gpus: int,
    python: str,
) -> Verdict:
    """Whether one script runs under `edit`. `read_by_any`: every recorded script's inputs."""
    if record is None:
        return Verdict(True, "never recorded")
    if not record.ever_passed:
        return Verdict(True, "never passed")
    if record.result != PASSED:
        return Verdict(True, "failed at its last run")
    if record.gpus != gpus:
        return Verdict(True, f"recorded with {record.gpus} GPU(s), {gpus} visible now")
    if record.python != python:
        return Verdict(True, f"recorded under Python {record.python}, this is {python}")
    reasons = sorted(
        r for r in (_why(rel, record, edit, rules, read_by_any) for rel in sorted(edit.paths(record))) if r
    )
    if not reasons:
        return Verdict(False, "nothing it reached changed")
    more = f" (and {len(reasons) - 1} more)" if len(reasons) > 1 else ""
    return Verdict(True, reasons[0][1] + more)


EVERY_SCRIPT, THIS_SCRIPT = 0, 1  # a reason that runs every script is the one shown first


def _why(
    rel: str, record: ScriptRecord, edit: Edit, rules: Rules, read_by_any: Collection[str]
) -> tuple[int, str] | None:
    reason = rules.everything_because(rel)
    if reason:
        return EVERY_SCRIPT, reason
    if rel in record.reach:
        changed = edit.changed_in(record, rel)
        if changed is None:
            return THIS_SCRIPT, f"{rel} was deleted"
        if not changed:
            return None
        if changed[0] == SKELETON:
            return THIS_SCRIPT, f"changed {rel} (import-time code)"
        return THIS_SCRIPT, f"changed {rel}::{changed[0]}"
    if rules.in_source(rel):
        return None  # source code this script never ran
    if rel in record.inputs:
        return THIS_SCRIPT, f"changed {rel}"
    if rel in read_by_any or rules.unrelated_file(rel):
        return None
    return EVERY_SCRIPT, f"changed {rel}, which no recorded run reads (the reach cannot see it)"
