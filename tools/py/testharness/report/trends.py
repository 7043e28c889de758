"""Metric trends across runs and the flags they earn (pure: works on `results.Run` records)."""

from __future__ import annotations

import fnmatch
import math
from collections.abc import Sequence
from dataclasses import dataclass

from testharness.report.rules import Rule, RuleBook
from testharness.results import Run, finite_number


@dataclass(frozen=True)
class Point:
    run: Run
    value: float


@dataclass(frozen=True)
class Trend:
    key: str
    metric: str
    rule: Rule
    points: tuple[Point, ...]  # oldest first; only the runs that recorded this metric
    flags: tuple[str, ...]

    @property
    def latest(self) -> float:
        return self.points[-1].value

    @property
    def previous(self) -> float | None:
        return self.points[-2].value if len(self.points) > 1 else None

    @property
    def best(self) -> float | None:
        """Lowest (or highest) value seen; None when neither way is better."""
        values = [p.value for p in self.points]
        if self.rule.direction == "lower":
            return min(values)
        if self.rule.direction == "higher":
            return max(values)
        return None

    @property
    def flagged(self) -> bool:
        return bool(self.flags)


def relative_change(new: float, old: float) -> float:
    """(new - old) / |old|; +-inf when old is 0 and new is not, 0 when both are 0."""
    if old == 0:
        return 0.0 if new == 0 else math.copysign(math.inf, new)
    return (new - old) / abs(old)


def format_value(value: float | None) -> str:
    """Seven significant digits: enough to see 1.000004 drift from 1, short enough for a table."""
    if value is None:
        return "-"
    return f"{value:.7g}"


def format_change(change: float | None) -> str:
    if change is None:
        return "-"
    if math.isinf(change):
        return "+inf%" if change > 0 else "-inf%"
    return f"{change * 100:+.1f}%"


def judge(rule: Rule, new: float, old: float, against: str) -> str | None:
    """A flag text when going from `old` to `new` is a change the rule calls bad."""
    delta = new - old
    if abs(delta) <= rule.min_abs:
        return None
    change = relative_change(new, old)
    if abs(change) * 100 <= rule.threshold_pct:
        return None
    bad = (
        (rule.direction == "lower" and delta > 0)
        or (rule.direction == "higher" and delta < 0)
        or rule.direction == "either"
    )
    if not bad:
        return None
    word = "changed" if rule.direction == "either" else "regressed"
    return f"{word} {format_change(change)} vs {against}"


def matches(name: str, patterns: Sequence[str]) -> bool:
    """No patterns match everything; a pattern without glob characters matches as a substring."""
    if not patterns:
        return True
    for pattern in patterns:
        if any(c in pattern for c in "*?["):
            if fnmatch.fnmatchcase(name, pattern):
                return True
        elif pattern in name:  # `-t policy` is enough
            return True
    return False


def compute_trends(
    runs: Sequence[Run],
    book: RuleBook,
    tests: Sequence[str] = (),
    metrics: Sequence[str] = (),
) -> list[Trend]:
    """One Trend per (test key, numeric metric) seen in `runs`, sorted by key then metric."""
    series: dict[tuple[str, str], list[Point]] = {}
    for run in runs:
        for key, values in run.metrics.items():
            if not matches(key, tests):
                continue
            for metric, raw in values.items():
                number = finite_number(raw)
                if number is None or not matches(metric, metrics):
                    continue  # lists, strings, NaN: not plottable, not comparable
                series.setdefault((key, metric), []).append(Point(run, number))
    trends = []
    for (key, metric), points in sorted(series.items()):
        rule = book.rule(metric)
        flags: list[str] = []
        if len(points) > 1:
            latest = points[-1].value
            flag = judge(rule, latest, points[-2].value, "previous")
            if flag:
                flags.append(flag)
            if rule.direction != "either":
                seen = [p.value for p in points]
                best = min(seen) if rule.direction == "lower" else max(seen)
                flag = judge(rule, latest, best, "best")
                if flag:
                    flags.append(flag)
        trends.append(Trend(key, metric, rule, tuple(points), tuple(flags)))
    return trends


def trend_changes(trend: Trend) -> tuple[float | None, float | None]:
    """(change vs previous, change vs best), relative; None where there is nothing to compare."""
    prev = trend.previous
    best = trend.best
    return (
        relative_change(trend.latest, prev) if prev is not None else None,
        relative_change(trend.latest, best) if best is not None and len(trend.points) > 1 else None,
    )
