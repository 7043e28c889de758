"""Flaky tests: outcomes that differ across runs of one commit, or a pass after a retry (pure)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from testharness.results import Run, has_real_commit

_FAILING = {"failed", "error"}


@dataclass(frozen=True)
class FlakyTest:
    nodeid: str
    commit: str
    outcomes: Mapping[str, int]  # final outcome -> number of runs at this commit
    runs: int
    passed_on_retry: int  # runs where an attempt failed and a later one passed

    def describe(self) -> str:
        parts = [", ".join(f"{name} {count}" for name, count in sorted(self.outcomes.items()))]
        if self.passed_on_retry:
            parts.append(f"passed after a retry in {self.passed_on_retry} run(s)")
        return "; ".join(p for p in parts if p)


def find_flaky(runs: Sequence[Run]) -> list[FlakyTest]:
    """Tests whose outcome differs across runs at the same git commit, or that passed on retry.

    Skips are left out: a test skipped on a machine without a GPU and passed on one with a
    GPU is not flaky. Runs without a real commit cannot be compared and are ignored.
    """
    by_commit: dict[str, list[Run]] = {}
    for run in runs:
        if has_real_commit(run):
            by_commit.setdefault(run.git_commit, []).append(run)
    found: list[FlakyTest] = []
    for commit, commit_runs in by_commit.items():
        outcomes: dict[str, Counter[str]] = {}
        seen: Counter[str] = Counter()
        retried: Counter[str] = Counter()
        for run in commit_runs:
            for nodeid, record in run.tests.items():
                seen[nodeid] += 1
                if record.outcome != "skipped":
                    outcomes.setdefault(nodeid, Counter())[record.outcome] += 1
                attempts = record.attempts
                if any(a in _FAILING for a in attempts[:-1]) and attempts and attempts[-1] == "passed":
                    retried[nodeid] += 1
        for nodeid in sorted(set(outcomes) | set(retried)):
            counts = outcomes.get(nodeid, Counter())
            if len(counts) > 1 or retried[nodeid]:
                found.append(FlakyTest(nodeid, commit, dict(counts), seen[nodeid], retried[nodeid]))
    found.sort(key=lambda f: (f.nodeid, f.commit))
    return found
