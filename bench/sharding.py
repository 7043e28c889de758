"""Benchmark: duration-balanced shards (--shard I/N) against a naive split by file count.

    uv run bench/sharding.py                 # project history + a seeded synthetic suite
    uv run bench/sharding.py --shards 2,4,8 --history-dir tests/unit/unit_results

Method (leave-one-out, no test is run): take the latest of the largest recorded runs
(the last full-suite run); the shard plan is computed from the runs before it, exactly as
`--shard I/N` would have computed it then; the *actual* time of each shard is the sum of
the durations that run measured for its tests. The naive split cuts the sorted list of test files into N groups of (nearly)
equal file count. The ideal is the latest run's total / N.

Prints a table and rewrites only its own section of docs/benchmarks.md (between the
`<!-- sharding:start -->` and `<!-- sharding:end -->` markers).
"""

from __future__ import annotations

import argparse
import random
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import date
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
try:
    import testharness  # noqa: F401
except ImportError:  # run without the package installed: use the checkout
    sys.path.insert(0, str(ROOT / "tools" / "py"))

from testharness.history import (  # noqa: E402  (after the sys.path fallback above)
    load_history,
    recorded_durations,
    resolve_history_dir,
)
from testharness.project_root import find_project_root  # noqa: E402
from testharness.shard_plan import plan_shards  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _bench_common import update_section  # noqa: E402


@dataclass(frozen=True)
class Row:
    shards: int
    tests: int
    ideal: float
    expected_slowest: float
    actual_slowest: float
    naive_slowest: float

    def cells(self) -> list[str]:
        return [
            str(self.shards),
            str(self.tests),
            f"{self.ideal:.2f}",
            f"{self.expected_slowest:.2f}",
            f"{self.actual_slowest:.2f}",
            f"{self.actual_slowest / self.ideal:.2f}" if self.ideal else "-",
            f"{self.naive_slowest:.2f}",
            f"{self.naive_slowest / self.ideal:.2f}" if self.ideal else "-",
        ]


HEADER = [
    "N",
    "tests",
    "ideal s (total/N)",
    "balanced: expected slowest s",
    "balanced: actual slowest s",
    "balanced / ideal",
    "by file count: actual slowest s",
    "by file count / ideal",
]


def naive_file_split(tests: Sequence[str], count: int) -> list[list[str]]:
    """Sorted test files cut into `count` contiguous groups of nearly equal file count."""
    files = sorted({t.split("::", 1)[0] for t in tests})
    size, extra = divmod(len(files), count)
    groups: list[list[str]] = []
    start = 0
    for i in range(count):
        end = start + size + (1 if i < extra else 0)
        chosen = set(files[start:end])
        groups.append([t for t in tests if t.split("::", 1)[0] in chosen])
        start = end
    return groups


def evaluate(history_durations: Mapping[str, float], actual: Mapping[str, float], counts: Sequence[int]) -> list[Row]:
    tests = sorted(actual)
    total = sum(actual.values())
    rows = []
    for n in counts:
        plan = plan_shards(tests, history_durations, n)
        rows.append(
            Row(
                shards=n,
                tests=len(tests),
                ideal=total / n,
                expected_slowest=plan.slowest_seconds,
                actual_slowest=max(sum(actual[t] for t in s.tests) for s in plan.shards),
                naive_slowest=max(sum(actual[t] for t in g) for g in naive_file_split(tests, n)),
            )
        )
    return rows


def synthetic_suite(seed: int) -> tuple[dict[str, float], dict[str, float]]:
    """A GPU-suite-like shape: many quick tests, a few slow files; 3 noisy history runs + 1 new run."""
    rng = random.Random(seed)
    base: dict[str, float] = {}
    for f in range(40):
        heavy = f % 9 == 0  # a few files of multi-GPU / model-loading tests
        for t in range(rng.randint(1, 14)):
            base[f"tests/unit/pkg{f % 6}/test_mod{f:02d}.py::test_{t}"] = (
                rng.uniform(20, 90) if heavy else rng.lognormvariate(0.0, 1.2)
            )
    # Each run measures every test with +-15% noise; the planner sees the median of 3 runs.
    history_runs = [{k: v * rng.uniform(0.85, 1.15) for k, v in base.items()} for _ in range(3)]
    history = {k: sorted(run[k] for run in history_runs)[1] for k in base}
    actual = {k: v * rng.uniform(0.85, 1.15) for k, v in base.items()}
    return history, actual


def markdown_table(rows: Sequence[Row]) -> str:
    lines = ["| " + " | ".join(HEADER) + " |", "|" + "---|" * len(HEADER)]
    lines += ["| " + " | ".join(r.cells()) + " |" for r in rows]
    return "\n".join(lines)


def print_table(title: str, rows: Sequence[Row]) -> None:
    try:
        from rich.console import Console
        from rich.table import Table
    except ImportError:
        print(title)
        print(markdown_table(rows))
        return
    table = Table(title=title)
    for name in HEADER:
        table.add_column(name, justify="right")
    for row in rows:
        table.add_row(*row.cells())
    Console().print(table)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--shards", default="2,3,4,8", help="comma-separated shard counts (default 2,3,4,8)")
    parser.add_argument("--history-dir", help="results history (default: as --shard reads it)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the synthetic suite (default 0)")
    parser.add_argument("--docs", default=str(ROOT / "docs" / "benchmarks.md"), help="markdown file to update")
    parser.add_argument("--no-docs", action="store_true", help="print only; do not touch the docs")
    args = parser.parse_args(argv)
    try:
        counts = [int(x) for x in args.shards.split(",") if x.strip()]
    except ValueError:
        print(f"bench/sharding.py: error: --shards expects numbers like 2,4,8, got {args.shards!r}", file=sys.stderr)
        return 2
    if not counts or min(counts) < 1:
        print("bench/sharding.py: error: every shard count must be at least 1", file=sys.stderr)
        return 2

    intro = (
        f"## Sharding (`--shard I/N`)\n\nGenerated by `uv run bench/sharding.py` on {date.today().isoformat()}. "
        "Leave-one-out: shards are planned from the runs recorded before the last full-suite run, and "
        "timed with the durations that run measured. *Ideal* is that run's total / N; "
        "*by file count* splits the sorted test files into N equal-count groups."
    )
    sections = [intro]
    history = load_history(resolve_history_dir(args.history_dir, find_project_root(ROOT)))
    for warning in history.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    # The run to time: the most recent of the largest runs (a full suite, not a `-k` rerun).
    biggest = max((len(r.tests) for r in history.runs[1:]), default=0)
    target = max((i for i, r in enumerate(history.runs) if i > 0 and len(r.tests) == biggest), default=None)
    if target is not None and biggest > 0:
        latest = history.runs[target]
        actual = {t: r.duration for t, r in latest.tests.items() if r.duration is not None}
        rows = evaluate(recorded_durations(history.runs[:target]), actual, counts)
        title = (
            f"Project suite: planned from {target} earlier run(s), timed with the run of "
            f"{latest.start_time} ({latest.short_commit}), {sum(actual.values()):.1f} s in total"
        )
        print_table(title, rows)
        sections.append(f"### {title}\n\n{markdown_table(rows)}")
    else:
        note = f"Project suite: fewer than 2 runs in {history.directory}; run the unit tests twice first."
        print(note)
        sections.append(f"### Project suite\n\n{note}")

    plan_history, actual = synthetic_suite(args.seed)
    rows = evaluate(plan_history, actual, counts)
    n_files = len({t.split("::")[0] for t in actual})
    title = (
        f"Synthetic suite (seed {args.seed}): {len(actual)} tests in {n_files} files, "
        f"{sum(actual.values()):.0f} s, +-15% run-to-run noise"
    )
    print_table(title, rows)
    sections.append(f"### {title}\n\n{markdown_table(rows)}")

    if not args.no_docs:
        update_section("sharding", "\n\n".join(sections), Path(args.docs))
        print(f"updated the sharding section of {args.docs}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
