"""Split selected tests into N shards of about equal expected duration.

Pure: no pytest, no Ray. Longest-processing-time-first greedy (LPT): take tests from the
longest to the shortest and give each to the shard with the least expected time so far.
It is within 4/3 of the optimum in the worst case and much closer on real suites.

Every tie is broken by nodeid or shard index, never by dict or set order, so two machines
given the same tests and the same history compute the same plan and, together, run every
test exactly once.
"""

from __future__ import annotations

import heapq
import re
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

#: Expected seconds of a test when no test has any recorded duration.
NO_HISTORY_SECONDS = 1.0

_SPEC_RE = re.compile(r"^\s*(\d+)\s*/\s*(\d+)\s*$")


class ShardSpecError(ValueError):
    """A bad `I/N` argument; the message is one line a user can act on."""


def parse_shard_spec(text: str) -> tuple[int, int]:
    """`"2/4"` -> `(2, 4)`; ShardSpecError unless it is I/N with 1 <= I <= N."""
    match = _SPEC_RE.match(text)
    if not match:
        raise ShardSpecError(f"--shard expects I/N (e.g. --shard 2/4), got {text!r}")
    index, count = int(match.group(1)), int(match.group(2))
    if count < 1:
        raise ShardSpecError(f"--shard {text}: the number of shards N must be at least 1")
    if not 1 <= index <= count:
        raise ShardSpecError(f"--shard {text}: the shard index I must be between 1 and {count}")
    return index, count


def parse_shard_id(shard_id: str | None, num_shards: str | None) -> tuple[int, int]:
    """pytest-shard's `--shard-id I --num-shards N` -> `(I + 1, N)`, the `--shard I/N` form.

    As in pytest-shard, I counts from 0 and the flags default to 0 and 1 (`--num-shards 3`
    alone is shard 0 of 3). ShardSpecError unless 0 <= I < N.
    """
    index = _whole(shard_id, "--shard-id", default=0, minimum=0)
    count = _whole(num_shards, "--num-shards", default=1, minimum=1)
    if index >= count:
        raise ShardSpecError(
            f"--shard-id {index} --num-shards {count}: the shard id must be between 0 and {count - 1} "
            "(--shard-id counts from 0, as in pytest-shard)"
        )
    return index + 1, count


def _whole(text: str | None, flag: str, *, default: int, minimum: int) -> int:
    if text is None:
        return default
    if not text.strip().isdigit() or int(text) < minimum:
        raise ShardSpecError(f"{flag} expects a whole number >= {minimum}, got {text!r}")
    return int(text)


@dataclass(frozen=True)
class Shard:
    """One shard: its 1-based index, its tests (in the order given) and their expected seconds."""

    index: int
    tests: tuple[str, ...]
    expected_seconds: float


@dataclass(frozen=True)
class ShardPlan:
    shards: tuple[Shard, ...]
    expected: Mapping[str, float]  # expected seconds of every planned test
    estimated: frozenset[str]  # tests with no recorded duration (they got `default_seconds`)
    default_seconds: float

    @property
    def total_seconds(self) -> float:
        return sum(shard.expected_seconds for shard in self.shards)

    @property
    def ideal_seconds(self) -> float:
        """Total / N: what a perfect split would give every shard."""
        return self.total_seconds / len(self.shards) if self.shards else 0.0

    @property
    def slowest_seconds(self) -> float:
        return max((shard.expected_seconds for shard in self.shards), default=0.0)


def default_duration(tests: Sequence[str], durations: Mapping[str, float]) -> float:
    """What a test with no history is expected to take.

    The median of the selected tests that have history (they are the best guide to this
    selection), else of everything recorded, else NO_HISTORY_SECONDS.
    """
    known = [durations[t] for t in tests if t in durations]
    if known:
        return float(statistics.median(known))
    if durations:
        return float(statistics.median(durations.values()))
    return NO_HISTORY_SECONDS


def plan_shards(tests: Sequence[str], durations: Mapping[str, float], count: int) -> ShardPlan:
    """Partition `tests` (nodeids, in collection order) into `count` shards by LPT.

    Each shard lists its tests in the order they were given, so a shard runs its tests in
    the same relative order as the unsharded suite (run_first tests stay first).
    """
    if count < 1:
        raise ShardSpecError(f"the number of shards must be at least 1, got {count}")
    if len(set(tests)) != len(tests):
        raise ValueError("duplicate test ids given to plan_shards")
    default = default_duration(tests, durations)
    expected = {t: max(0.0, float(durations[t])) if t in durations else default for t in tests}
    position = {t: i for i, t in enumerate(tests)}

    # Heap of (load, shard index): the least loaded shard, and on equal loads the lowest
    # index, so the choice never depends on anything but the inputs.
    heap = [(0.0, i) for i in range(count)]
    members: list[list[str]] = [[] for _ in range(count)]
    for test in sorted(tests, key=lambda t: (-expected[t], t)):
        load, target = heapq.heappop(heap)
        members[target].append(test)
        heapq.heappush(heap, (load + expected[test], target))

    shards = tuple(
        Shard(
            index=i + 1,
            tests=tuple(sorted(members[i], key=position.__getitem__)),
            expected_seconds=sum(expected[t] for t in members[i]),
        )
        for i in range(count)
    )
    return ShardPlan(
        shards=shards,
        expected=expected,
        estimated=frozenset(t for t in tests if t not in durations),
        default_seconds=default,
    )


def longest_files_first(tests: Sequence[str], durations: Mapping[str, float]) -> list[str]:
    """`tests` (nodeids) grouped by file, the files longest expected first, each keeping its order.

    For `-n` with whole files per worker (`--dist loadfile`): xdist hands files out in the
    order given, so the longest file starts at once instead of last, where it would be the
    run's tail. A test with no history counts as `default_duration`; ties go by file name.
    """
    default = default_duration(tests, durations)
    files: dict[str, list[str]] = {}
    for test in tests:
        files.setdefault(test.split("::", 1)[0], []).append(test)
    seconds = {name: sum(durations.get(t, default) for t in members) for name, members in files.items()}
    return [t for name in sorted(files, key=lambda f: (-seconds[f], f)) for t in files[name]]


def format_plan(plan: ShardPlan, *, highlight: int | None = None, list_tests: bool = True) -> list[str]:
    """Plain-text lines describing the plan (used by `--shard-plan` and the benchmark)."""
    n_tests = sum(len(s.tests) for s in plan.shards)
    lines = [
        (
            f"shard plan: {len(plan.shards)} shards, {n_tests} tests, expected total {plan.total_seconds:.1f} s, "
            f"ideal {plan.ideal_seconds:.1f} s/shard, slowest {plan.slowest_seconds:.1f} s"
        ),
    ]
    if plan.estimated:
        lines.append(
            f"  {len(plan.estimated)} test(s) without recorded duration counted as {plan.default_seconds:.2f} s (marked *)"
        )
    for shard in plan.shards:
        mark = "  <- this shard" if highlight == shard.index else ""
        lines.append(
            f"shard {shard.index}/{len(plan.shards)}: {len(shard.tests)} tests, expected {shard.expected_seconds:.1f} s{mark}"
        )
        if list_tests:
            for test in shard.tests:
                star = " *" if test in plan.estimated else ""
                lines.append(f"  {plan.expected[test]:8.2f} s  {test}{star}")
    return lines
