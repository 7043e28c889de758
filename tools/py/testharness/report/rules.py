"""Which way is good for a metric and how far it may move unflagged (pure: no I/O).

Rules come from `[tool.testharness.report]` (`directions = {glob = dir}`,
`threshold_pct = {dir = pct}`), then from `--direction GLOB=DIR` and `--threshold [DIR=]PCT`.
"""

from __future__ import annotations

import fnmatch
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

Direction = Literal["lower", "higher", "either"]
DIRECTIONS: tuple[Direction, ...] = ("lower", "higher", "either")

#: Relative change (percent) beyond which a metric is flagged, per direction. Time and
#: memory are "lower is better"; timings are noisy, hence the wider band for them.
DEFAULT_THRESHOLD_PCT: dict[Direction, float] = {"lower": 20.0, "higher": 10.0, "either": 10.0}
#: Elapsed-time changes smaller than this many seconds are never flagged (scheduler noise).
ELAPSED_NOISE_SECONDS = 0.5
CONFIG_TABLE = "[tool.testharness.report]"


class ReportError(Exception):
    """Bad input to the report command; the message is one line for the user."""


@dataclass(frozen=True)
class Rule:
    """How a metric is judged: which way is good, and how far it may move unflagged."""

    direction: Direction
    threshold_pct: float
    min_abs: float = 0.0  # absolute changes up to this are noise, whatever their percentage


@dataclass
class RuleBook:
    """Directions by metric-name glob, thresholds by direction; `rule()` picks one per metric."""

    directions: dict[str, Direction] = field(default_factory=dict)
    threshold_pct: dict[Direction, float] = field(default_factory=lambda: dict(DEFAULT_THRESHOLD_PCT))

    def rule(self, metric: str) -> Rule:
        direction: Direction
        for pattern, configured in self.directions.items():  # first matching glob wins
            if fnmatch.fnmatchcase(metric, pattern):
                direction = configured
                break
        else:
            direction = default_direction(metric)
        min_abs = ELAPSED_NOISE_SECONDS if metric == "_elapsed" else 0.0
        return Rule(direction, self.threshold_pct[direction], min_abs)


def default_direction(metric: str) -> Direction:
    """`_elapsed` and memory-like metrics (name contains "mem"): up is bad. Others: either way."""
    if metric == "_elapsed" or "mem" in metric.lower():
        return "lower"
    return "either"


def _parse_direction(value: Any, where: str) -> Direction:
    if value not in DIRECTIONS:
        raise ReportError(f"{where}: direction must be one of {', '.join(DIRECTIONS)}, got {value!r}")
    direction: Direction = value
    return direction


def _parse_pct(value: Any, where: str) -> float:
    try:
        pct = float(str(value).rstrip("%"))
    except ValueError:
        raise ReportError(f"{where}: threshold must be a percentage like 15 or 15%, got {value!r}") from None
    if not math.isfinite(pct) or pct < 0:
        raise ReportError(f"{where}: threshold must be a non-negative percentage, got {value!r}")
    return pct


def rulebook_from_config(config: Mapping[str, Any], source: str = CONFIG_TABLE) -> RuleBook:
    """From the report table; `source` names it in errors (e.g. "pyproject.toml [tool.testharness.report]")."""
    book = RuleBook()
    directions = config.get("directions", {})
    if not isinstance(directions, dict):
        raise ReportError(f"{source} directions must be a table of glob = direction")
    for pattern, value in directions.items():
        book.directions[str(pattern)] = _parse_direction(value, f"{source} directions.{pattern}")
    thresholds = config.get("threshold_pct", {})
    if not isinstance(thresholds, dict):
        raise ReportError(f"{source} threshold_pct must be a table of direction = percent")
    for name, value in thresholds.items():
        where = f"{source} threshold_pct.{name}"
        book.threshold_pct[_parse_direction(name, where)] = _parse_pct(value, where)
    return book


def apply_cli_rules(book: RuleBook, directions: Sequence[str], thresholds: Sequence[str]) -> RuleBook:
    """`--direction GLOB=DIR` (before the config's globs) and `--threshold [DIR=]PCT`."""
    cli_dirs: dict[str, Direction] = {}
    for item in directions:
        pattern, sep, value = item.rpartition("=")
        if not sep or not pattern:
            raise ReportError(f"--direction expects GLOB=lower|higher|either, got {item!r}")
        cli_dirs[pattern] = _parse_direction(value, f"--direction {item}")
    book.directions = {**cli_dirs, **{k: v for k, v in book.directions.items() if k not in cli_dirs}}
    for item in thresholds:
        name, sep, value = item.partition("=")
        if sep:
            book.threshold_pct[_parse_direction(name, f"--threshold {item}")] = _parse_pct(value, f"--threshold {item}")
        else:
            pct = _parse_pct(item, f"--threshold {item}")
            for direction in DIRECTIONS:
                book.threshold_pct[direction] = pct
    return book
