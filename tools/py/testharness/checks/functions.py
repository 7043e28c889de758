"""The functions a metric check may call: `mean(data["train/loss"], -3) < 0.5`.

A metric series is {"<step>": value} (steps from 1) or a list; every function reads values
with `float(v)` and lets a NaN through (min/max/median would otherwise hide it by position).
They shadow the builtins on purpose: checks read `min(data["x"])`, not `series_min(...)`.
"""

from __future__ import annotations

import builtins
import math
import statistics
from collections.abc import Callable, Iterable, Mapping
from typing import Any


def _values(args: tuple[Any, ...], name: str) -> list[float]:
    """The float values of one series (dict values or list items) or of several args."""
    if len(args) == 1:
        (only,) = args
        items: Iterable[Any]
        if isinstance(only, Mapping):
            items = only.values()
        elif isinstance(only, (list, tuple)):
            items = only
        else:
            items = [only]
    elif not args:
        raise TypeError(f"{name} expected at least 1 argument, got 0")
    else:
        items = args
    return [float(v) for v in items]


def min(*args: Any) -> float:
    """Smallest value of a series (over `float(v)` of its values); NaN if any is NaN."""
    vals = _values(args, "min")
    if any(math.isnan(v) for v in vals):
        return math.nan  # builtin min would depend on the position of the NaN
    return builtins.min(vals)


def max(*args: Any) -> float:
    """Largest value of a series (over `float(v)` of its values); NaN if any is NaN."""
    vals = _values(args, "max")
    if any(math.isnan(v) for v in vals):
        return math.nan
    return builtins.max(vals)


def ratio_above(value: Any, threshold: float) -> float:
    """Fraction of the series' values that are `>= threshold` (0.0 for an empty series)."""
    vals = _values((value,), "ratio_above")
    if not vals:
        return 0.0
    return sum(1 for v in vals if v >= threshold) / len(vals)


def all_finite(value: Any) -> bool:
    """True when the series has at least one value and every value is finite (no NaN, no inf)."""
    vals = _values((value,), "all_finite")
    return bool(vals) and all(math.isfinite(v) for v in vals)


def _series_items(value: Any, name: str) -> list[tuple[int, float]]:
    """(step, float value) pairs of a series: a {"<step>": v} dict, or a list (steps from 1)."""
    if isinstance(value, Mapping):
        pairs: list[tuple[int, float]] = []
        for step, v in value.items():
            try:
                k = int(step)
            except (TypeError, ValueError):
                raise ValueError(f"{name}: step keys must be integers, got {step!r}") from None
            pairs.append((k, float(v)))
        return pairs
    if isinstance(value, (list, tuple)):
        return [(i, float(v)) for i, v in enumerate(value, start=1)]
    raise TypeError(f"{name}: expected a metric series ({{step: value}}), got {type(value).__name__}")


def _select_range(value: Any, range_start: float, range_end: float, name: str) -> list[float]:
    """Values whose step k satisfies range_start <= k < range_end (negative/<=0 from the end)."""
    items = _series_items(value, name)
    # "last step" is the highest step present: a series resumed at step 50 still works.
    last = builtins.max((k for k, _ in items), default=0)
    start = last + 1 + range_start if range_start < 0 else range_start
    end = last + 1 + range_end if range_end <= 0 else range_end
    vals = [v for k, v in sorted(items) if start <= k < end]
    if not vals:
        if items:
            have = f"series has steps {builtins.min(k for k, _ in items)}..{last}"
        else:
            have = "series is empty"
        raise statistics.StatisticsError(
            f"{name} requires at least one data point: no step k with {start} <= k < {end} ({have})"
        )
    return vals


def mean(value: Any, range_start: float = 1, range_end: float = 0, ignore_top_p: float = 0.0) -> float:
    """Mean over steps range_start <= k < range_end, optionally dropping the top fraction.

    range_end <= 0 means "last step + 1 + range_end" (0: up to the last step included);
    a negative range_start means "last step + 1 + range_start" (-5: the last five steps).
    ignore_top_p (0..1) drops the highest values, keeping the lowest int(n * (1 - p)),
    at least one.
    """
    if not 0.0 <= ignore_top_p <= 1.0:
        raise ValueError(f"ignore_top_p must be between 0.0 and 1.0, got {ignore_top_p}")
    vals = _select_range(value, range_start, range_end, "mean")
    if ignore_top_p > 0.0:
        keep = builtins.max(1, int(len(vals) * (1.0 - ignore_top_p)))
        vals = sorted(vals)[:keep]
    return statistics.mean(vals)


def median(value: Any, range_start: float = 1, range_end: float = 0) -> float:
    """Median over steps range_start <= k < range_end (same range rules as `mean`)."""
    vals = _select_range(value, range_start, range_end, "median")
    if any(math.isnan(v) for v in vals):
        return math.nan  # sorting with NaN gives an arbitrary median
    return statistics.median(vals)


ALLOWED_FUNCTIONS: dict[str, Callable[..., Any]] = {
    "min": min,
    "max": max,
    "mean": mean,
    "median": median,
    "ratio_above": ratio_above,
    "all_finite": all_finite,
    "len": builtins.len,
    "abs": builtins.abs,
}
