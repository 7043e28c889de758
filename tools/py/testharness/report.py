"""`testharness report`: trends of tracked metrics, regressions and flaky tests from history.

The core (trends, flags, flaky detection, the HTML page) is pure and works on
`history.Run` records; the rich tables, argument parsing and matplotlib are the edges.

    uv run testharness report                      # tables in the terminal
    uv run testharness report --html report.html   # self-contained page, one chart per metric
    uv run testharness report --png charts/        # the same charts as PNG files (matplotlib)
"""

from __future__ import annotations

import argparse
import fnmatch
import html
import math
import re
import sys
import tomllib
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from testharness.atomic_io import replacing, write_text_atomic
from testharness.history import History, find_project_root, load_history, resolve_history_dir
from testharness.results import Run, has_real_commit

Direction = Literal["lower", "higher", "either"]
DIRECTIONS: tuple[Direction, ...] = ("lower", "higher", "either")

#: Relative change (percent) beyond which a metric is flagged, per direction. Time and
#: memory are "lower is better"; timings are noisy, hence the wider band for them.
DEFAULT_THRESHOLD_PCT: dict[Direction, float] = {"lower": 20.0, "higher": 10.0, "either": 10.0}
#: Elapsed-time changes smaller than this many seconds are never flagged (scheduler noise).
ELAPSED_NOISE_SECONDS = 0.5


class ReportError(Exception):
    """Bad input to the report command; the message is one line for the user."""


# --------------------------------------------------------------------------- rules


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


def rulebook_from_config(config: Mapping[str, Any]) -> RuleBook:
    """From `[tool.testharness.report]`: `directions = {glob = dir}`, `threshold_pct = {dir = pct}`."""
    book = RuleBook()
    directions = config.get("directions", {})
    if not isinstance(directions, dict):
        raise ReportError("[tool.testharness.report] directions must be a table of glob = direction")
    for pattern, value in directions.items():
        book.directions[str(pattern)] = _parse_direction(value, f"[tool.testharness.report] directions.{pattern}")
    thresholds = config.get("threshold_pct", {})
    if not isinstance(thresholds, dict):
        raise ReportError("[tool.testharness.report] threshold_pct must be a table of direction = percent")
    for name, value in thresholds.items():
        where = f"[tool.testharness.report] threshold_pct.{name}"
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


# --------------------------------------------------------------------------- trends


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


def _judge(rule: Rule, new: float, old: float, against: str) -> str | None:
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


def _numeric(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    number = float(value)
    return number if math.isfinite(number) else None


def _matches(name: str, patterns: Sequence[str]) -> bool:
    # A pattern without glob characters matches as a substring: `-t policy` is enough.
    if not patterns:
        return True
    for pattern in patterns:
        if any(c in pattern for c in "*?["):
            if fnmatch.fnmatchcase(name, pattern):
                return True
        elif pattern in name:
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
            if not _matches(key, tests):
                continue
            for metric, raw in values.items():
                number = _numeric(raw)
                if number is None or not _matches(metric, metrics):
                    continue  # lists, strings, NaN: not plottable, not comparable
                series.setdefault((key, metric), []).append(Point(run, number))
    trends = []
    for (key, metric), points in sorted(series.items()):
        rule = book.rule(metric)
        flags: list[str] = []
        if len(points) > 1:
            latest = points[-1].value
            flag = _judge(rule, latest, points[-2].value, "previous")
            if flag:
                flags.append(flag)
            if rule.direction != "either":
                seen = [p.value for p in points]
                best = min(seen) if rule.direction == "lower" else max(seen)
                flag = _judge(rule, latest, best, "best")
                if flag:
                    flags.append(flag)
        trends.append(Trend(key, metric, rule, tuple(points), tuple(flags)))
    return trends


# --------------------------------------------------------------------------- flaky tests


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


_FAILING = {"failed", "error"}


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


# --------------------------------------------------------------------------- formatting


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


def trend_changes(trend: Trend) -> tuple[float | None, float | None]:
    """(change vs previous, change vs best), relative; None where there is nothing to compare."""
    prev = trend.previous
    best = trend.best
    return (
        relative_change(trend.latest, prev) if prev is not None else None,
        relative_change(trend.latest, best) if best is not None and len(trend.points) > 1 else None,
    )


# --------------------------------------------------------------------------- charts (SVG)


@dataclass(frozen=True)
class Chart:
    trend: Trend
    slug: str


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("_")[:120] or "chart"


def make_charts(trends: Sequence[Trend]) -> list[Chart]:
    """One chart per trend, each with a unique file-safe slug."""
    used: Counter[str] = Counter()
    charts = []
    for trend in trends:
        base = _slug(f"{trend.key}__{trend.metric}")
        used[base] += 1
        charts.append(Chart(trend, base if used[base] == 1 else f"{base}_{used[base]}"))
    return charts


def nice_ticks(low: float, high: float, count: int = 5) -> list[float]:
    """Round tick values covering [low, high] (steps of 1, 2, 2.5 or 5 times a power of ten)."""
    if not (math.isfinite(low) and math.isfinite(high)):
        return [0.0]
    if high <= low:
        pad = abs(low) * 0.1 or 1.0
        low, high = low - pad, high + pad
    raw = (high - low) / max(count - 1, 1)
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 2.5, 5, 10) if m * power >= raw)
    start = math.floor(low / step) * step
    ticks: list[float] = []
    value = start
    while value < high + step * 0.5 and len(ticks) < 50:
        ticks.append(round(value, 12))
        value += step
    return ticks


def format_ticks(ticks: Sequence[float]) -> list[str]:
    """Tick labels with just enough decimals to tell neighbours apart (1.0000035 vs 1.000004)."""
    if len(ticks) < 2:
        return [format_value(t) for t in ticks]
    step = abs(ticks[1] - ticks[0]) or 1.0
    decimals = max(0, 1 - math.floor(math.log10(step)))
    if abs(max(ticks, key=abs)) >= 1e7 or step < 1e-9:
        return [f"{t:.3g}" for t in ticks]
    labels = [f"{t:.{decimals}f}" for t in ticks]
    # Trim zeros the labels all share (2.50, 3.00 -> 2.5, 3.0 would still differ; 2.00/3.00 -> 2/3).
    while decimals > 0 and all(label.endswith("0") for label in labels):
        decimals -= 1
        labels = [f"{t:.{decimals}f}" for t in ticks]
    return labels


def _x_positions(points: Sequence[Point]) -> list[float]:
    """Fractions in [0, 1]: proportional to start time when every run has one, else by order."""
    times = [p.run.started for p in points]
    if len(points) == 1:
        return [0.5]
    if all(t is not None for t in times):
        stamps = [t.timestamp() for t in times if t is not None]
        span = max(stamps) - min(stamps)
        if span > 0:
            return [(s - min(stamps)) / span for s in stamps]
    return [i / (len(points) - 1) for i in range(len(points))]


def svg_chart(trend: Trend, width: int = 640, height: int = 280) -> str:
    """A standalone inline SVG line chart: x = start time labelled by short commit, y = value."""
    left, right, top, bottom = 70, 20, 16, 78
    plot_w, plot_h = width - left - right, height - top - bottom
    values = [p.value for p in trend.points]
    ticks = nice_ticks(min(values), max(values))
    y_low, y_high = min(ticks[0], min(values)), max(ticks[-1], max(values))
    y_span = (y_high - y_low) or 1.0

    def y_of(value: float) -> float:
        return top + plot_h - (value - y_low) / y_span * plot_h

    xs = [left + f * plot_w for f in _x_positions(trend.points)]
    ys = [y_of(v) for v in values]
    esc = html.escape
    out = [
        (
            f'<svg class="chart-svg" xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
            f'viewBox="0 0 {width} {height}" role="img" aria-label="{esc(trend.key)} {esc(trend.metric)}">'
        ),
        f'<rect x="{left}" y="{top}" width="{plot_w}" height="{plot_h}" class="plot-bg"/>',
    ]
    for tick, label in zip(ticks, format_ticks(ticks)):
        y = y_of(tick)
        out.append(f'<line x1="{left}" x2="{left + plot_w}" y1="{y:.1f}" y2="{y:.1f}" class="grid"/>')
        out.append(f'<text x="{left - 6}" y="{y + 4:.1f}" class="ytick">{esc(label)}</text>')
    best = trend.best
    if best is not None and len(values) > 1:
        y = y_of(best)
        out.append(f'<line x1="{left}" x2="{left + plot_w}" y1="{y:.1f}" y2="{y:.1f}" class="best"/>')
    # Commit labels under the axis, skipping any that would overlap the previous one.
    last_label_x = -math.inf
    for i, (x, point) in enumerate(zip(xs, trend.points)):
        if x - last_label_x >= 14 or i == len(xs) - 1:
            last_label_x = x
            out.append(
                f'<text class="xtick" transform="translate({x:.1f},{top + plot_h + 12}) rotate(-40)">'
                f"{esc(point.run.short_commit)}</text>"
            )
    first, last = trend.points[0].run.start_time, trend.points[-1].run.start_time
    out.append(f'<text x="{left}" y="{height - 6}" class="xrange">{esc(first)}</text>')
    out.append(f'<text x="{left + plot_w}" y="{height - 6}" class="xrange end">{esc(last)}</text>')
    path = " ".join(f"{x:.1f},{y:.1f}" for x, y in zip(xs, ys))
    out.append(f'<polyline class="series" points="{path}"/>')
    for i, (x, y, point) in enumerate(zip(xs, ys, trend.points)):
        cls = "pt flagged" if i == len(xs) - 1 and trend.flagged else "pt"
        tip = f"{point.run.short_commit} · {point.run.start_time} · {format_value(point.value)}"
        out.append(f'<circle class="{cls}" cx="{x:.1f}" cy="{y:.1f}" r="4"><title>{esc(tip)}</title></circle>')
    out.append("</svg>")
    return "\n".join(out)


_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:24px;color:#1f2328;background:#fff}
h1{font-size:22px;margin:0 0 4px}h2{font-size:17px;margin:28px 0 8px}
.meta{color:#57606a;font-size:13px}
table{border-collapse:collapse;font-size:13px}th,td{border:1px solid #d0d7de;padding:4px 8px;text-align:left}
th{background:#f6f8fa}td.num{text-align:right;font-variant-numeric:tabular-nums}
tr.flagged td{background:#ffebe9}.bad{color:#cf222e;font-weight:600}.ok{color:#1a7f37}
#filter{font-size:14px;padding:4px 8px;width:320px;margin:6px 0 12px}
.charts{display:flex;flex-wrap:wrap;gap:16px}
figure.chart{margin:0;border:1px solid #d0d7de;border-radius:6px;padding:8px}
figure.chart.flagged{border-color:#cf222e}
figcaption{font-size:13px;font-weight:600;margin-bottom:4px;max-width:640px;overflow-wrap:anywhere}
figcaption .rule{font-weight:400;color:#57606a}
.plot-bg{fill:#fbfcfd;stroke:#d0d7de}.grid{stroke:#eaeef2}.best{stroke:#1a7f37;stroke-dasharray:4 3}
.ytick{font-size:11px;text-anchor:end;fill:#57606a}.xtick{font-size:11px;text-anchor:end;fill:#57606a;font-family:monospace}
.xrange{font-size:11px;fill:#57606a}.xrange.end{text-anchor:end}
.series{fill:none;stroke:#0969da;stroke-width:2}.pt{fill:#0969da}.pt.flagged{fill:#cf222e}
#report-status{font-size:12px;color:#57606a}
"""

# Records script errors from the very start, so the status line (and a headless test) sees them.
_HEAD_JS = """
window.__reportErrors = [];
window.addEventListener('error', function (e) { window.__reportErrors.push(String(e.message || e)); });
"""

_TAIL_JS = """
(function () {
  var status = document.getElementById('report-status');
  var charts = [];
  try {
    charts = Array.prototype.slice.call(document.querySelectorAll('figure.chart'));
    charts.forEach(function (fig) {
      var svg = fig.querySelector('svg.chart-svg');
      var series = svg && svg.querySelector('polyline.series');
      var pts = svg ? svg.querySelectorAll('circle.pt').length : 0;
      if (!series || pts !== Number(fig.getAttribute('data-points'))) {
        throw new Error('chart ' + fig.id + ' did not render its ' + fig.getAttribute('data-points') + ' points');
      }
    });
    var filter = document.getElementById('filter');
    if (filter) {
      filter.addEventListener('input', function () {
        var q = filter.value.toLowerCase();
        charts.forEach(function (fig) {
          fig.style.display = fig.getAttribute('data-name').toLowerCase().indexOf(q) >= 0 ? '' : 'none';
        });
      });
    }
  } catch (e) {
    window.__reportErrors.push(String(e.message || e));
  }
  var errors = window.__reportErrors;
  status.setAttribute('data-charts', String(charts.length));
  status.setAttribute('data-errors', String(errors.length));
  status.setAttribute('data-state', errors.length ? 'error' : 'ok');
  status.textContent = errors.length
    ? 'page errors: ' + errors.join(' | ')
    : 'rendered ' + charts.length + ' chart(s), no script errors';
})();
"""


def render_html(history: History, trends: Sequence[Trend], flaky: Sequence[FlakyTest], title: str) -> str:
    """The whole report as one self-contained HTML page: inline CSS, SVG and JS, no URL fetched."""
    esc = html.escape
    runs = history.runs
    charts = make_charts(trends)
    n_flagged = sum(1 for t in trends if t.flagged)
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        # Forbid every network fetch: the page must render from this file alone.
        (
            '<meta http-equiv="Content-Security-Policy" content="default-src \'none\'; '
            "style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:\">"
        ),
        f"<title>{esc(title)}</title><style>{_CSS}</style><script>{_HEAD_JS}</script></head><body>",
        f"<h1>{esc(title)}</h1>",
        f'<p class="meta">{len(runs)} run(s) from {esc(str(history.directory))}'
        + (f", {esc(runs[0].start_time)} to {esc(runs[-1].start_time)}" if runs else "")
        + f" · {len(trends)} metric series · {n_flagged} flagged · {len(flaky)} flaky</p>",
        '<p id="report-status" data-state="loading">loading…</p>',
    ]
    if history.warnings:
        parts.append("<ul>" + "".join(f'<li class="bad">{esc(w)}</li>' for w in history.warnings) + "</ul>")

    parts.append(
        "<h2>Metrics</h2><table><thead><tr><th>Test</th><th>Metric</th><th>Latest</th>"
        "<th>vs previous</th><th>vs best</th><th>Runs</th><th>Status</th></tr></thead><tbody>"
    )
    for trend in trends:
        prev, best = trend_changes(trend)
        status = "; ".join(trend.flags) if trend.flags else "ok"
        parts.append(
            f'<tr class="{"flagged" if trend.flagged else ""}"><td>{esc(trend.key)}</td><td>{esc(trend.metric)}</td>'
            f'<td class="num">{esc(format_value(trend.latest))}</td><td class="num">{format_change(prev)}</td>'
            f'<td class="num">{format_change(best)}</td><td class="num">{len(trend.points)}</td>'
            f'<td class="{"bad" if trend.flagged else "ok"}">{esc(status)}</td></tr>'
        )
    parts.append("</tbody></table>")

    parts.append("<h2>Flaky tests</h2>")
    if flaky:
        parts.append("<table><thead><tr><th>Test</th><th>Commit</th><th>Runs</th><th>Outcomes</th></tr></thead><tbody>")
        for item in flaky:
            parts.append(
                f"<tr><td>{esc(item.nodeid)}</td><td>{esc(item.commit[:7])}</td>"
                f'<td class="num">{item.runs}</td><td class="bad">{esc(item.describe())}</td></tr>'
            )
        parts.append("</tbody></table>")
    else:
        parts.append('<p class="ok">No test changed outcome across runs of the same commit.</p>')

    parts.append(f"<h2>Charts ({len(charts)})</h2>")
    parts.append('<input id="filter" type="search" placeholder="filter charts by test or metric">')
    parts.append('<div class="charts">')
    for chart in charts:
        trend = chart.trend
        rule = f"{trend.rule.direction} is better" if trend.rule.direction != "either" else "no preferred direction"
        parts.append(
            f'<figure class="chart{" flagged" if trend.flagged else ""}" id="chart-{esc(chart.slug)}" '
            f'data-name="{esc(trend.key)} {esc(trend.metric)}" data-points="{len(trend.points)}">'
            f'<figcaption>{esc(trend.key)} · {esc(trend.metric)} <span class="rule">({rule})</span></figcaption>'
            f"{svg_chart(trend)}</figure>"
        )
    parts.append("</div>")
    parts.append(f"<script>{_TAIL_JS}</script></body></html>")
    return "\n".join(parts)


# --------------------------------------------------------------------------- file output


def write_pngs(trends: Sequence[Trend], directory: Path) -> list[Path]:
    """One PNG per trend (matplotlib, headless Agg backend); returns the files written."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise ReportError(
            "--png needs matplotlib: run with `uv run --group test testharness report --png DIR`"
        ) from None
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for chart in make_charts(trends):
        trend = chart.trend
        xs = [p.run.started for p in trend.points]
        use_time = all(x is not None for x in xs) and len(set(xs)) == len(xs)
        x_values: list[Any] = xs if use_time else list(range(len(trend.points)))
        fig, ax = plt.subplots(figsize=(7, 3.4), dpi=110)
        ax.plot(x_values, [p.value for p in trend.points], marker="o", color="#0969da")
        if trend.flagged:
            ax.plot([x_values[-1]], [trend.latest], marker="o", color="#cf222e", markersize=9)
        best = trend.best
        if best is not None and len(trend.points) > 1:
            ax.axhline(best, color="#1a7f37", linestyle="--", linewidth=1, label="best")
            ax.legend(loc="best", fontsize=8)
        ax.set_xticks(x_values)
        ax.set_xticklabels([p.run.short_commit for p in trend.points], rotation=40, ha="right", fontsize=8)
        ax.set_title(f"{trend.key} · {trend.metric}", fontsize=10)
        ax.set_xlabel(f"start time ({trend.points[0].run.start_time} to {trend.points[-1].run.start_time})", fontsize=8)
        ax.grid(True, alpha=0.3)
        fig.tight_layout()
        target = directory / f"{chart.slug}.png"
        try:
            with replacing(target) as tmp:
                fig.savefig(tmp, format="png")
        finally:
            plt.close(fig)
        written.append(target)
    return written


# --------------------------------------------------------------------------- terminal (rich)


def print_report(history: History, trends: Sequence[Trend], flaky: Sequence[FlakyTest], flagged_only: bool) -> None:
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    console = Console()
    runs = history.runs
    for warning in history.warnings:
        console.print(f"[yellow]warning:[/] {escape(warning)}", highlight=False)
    console.print(
        escape(
            f"{len(runs)} run(s) in {history.directory}"
            + (f", {runs[0].start_time} to {runs[-1].start_time}" if runs else "")
        ),
        highlight=False,
    )

    run_table = Table(title="Runs (latest last)")
    for name in ("Start time", "Commit", "Exit", "Passed", "Failed", "Skipped", "Coverage", "GPUs"):
        run_table.add_column(name)
    for run in runs[-10:]:
        outcomes = Counter(t.outcome for t in run.tests.values())
        coverage = run.coverage
        run_table.add_row(
            escape(run.start_time),
            escape(run.short_commit),
            "-" if run.exit_status is None else str(run.exit_status),
            str(outcomes["passed"] + outcomes["xpassed"]),
            str(outcomes["failed"] + outcomes["error"]),
            str(outcomes["skipped"]),
            f"{coverage:.1f}%" if isinstance(coverage, (int, float)) else "-",
            escape(", ".join(sorted(set(run.gpu_types))) or "-"),
        )
    console.print(run_table)

    shown = [t for t in trends if t.flagged or not flagged_only]
    table = Table(title=f"Metric trends ({sum(t.flagged for t in trends)} flagged of {len(trends)})")
    table.add_column("Test", overflow="fold")
    table.add_column("Metric")
    table.add_column("Latest", justify="right")
    table.add_column("vs previous", justify="right")
    table.add_column("vs best", justify="right")
    table.add_column("Runs", justify="right")
    table.add_column("Status")
    for trend in shown:
        prev, best = trend_changes(trend)
        rule = trend.rule
        status = (
            "[bold red]" + "; ".join(trend.flags) + "[/]"
            if trend.flagged
            else f"[green]ok[/] (±{rule.threshold_pct:g}%)"
        )
        table.add_row(
            escape(trend.key),  # parametrized ids like [tp1] are not rich markup
            escape(trend.metric),
            format_value(trend.latest),
            format_change(prev),
            format_change(best),
            str(len(trend.points)),
            status,
        )
    console.print(table)

    if flaky:
        flaky_table = Table(title=f"Flaky tests ({len(flaky)}): outcome differs across runs of one commit")
        for name in ("Test", "Commit", "Runs", "Outcomes"):
            flaky_table.add_column(name, overflow="fold" if name == "Test" else "ellipsis")
        for item in flaky:
            flaky_table.add_row(
                escape(item.nodeid), item.commit[:7], str(item.runs), f"[red]{escape(item.describe())}[/]"
            )
        console.print(flaky_table)
    else:
        console.print("[green]No flaky tests:[/] no test changed outcome across runs of the same commit.")


# --------------------------------------------------------------------------- command


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--history-dir",
        metavar="DIR",
        help="results history (default: $TESTHARNESS_HISTORY_DIR, "
        "else [tool.testharness] results_dir + '/unit_results')",
    )
    parser.add_argument(
        "--last", type=int, default=30, metavar="N", help="only the N most recent runs (default 30; 0 = all)"
    )
    parser.add_argument(
        "-t",
        "--test",
        action="append",
        default=[],
        metavar="PATTERN",
        help="only tests whose key matches (substring, or glob with * ? [); repeatable",
    )
    parser.add_argument(
        "-m",
        "--metric",
        action="append",
        default=[],
        metavar="PATTERN",
        help="only metrics whose name matches (substring or glob); repeatable",
    )
    parser.add_argument(
        "--direction",
        action="append",
        default=[],
        metavar="GLOB=DIR",
        help="which way is better for matching metrics: lower, higher or either; repeatable",
    )
    parser.add_argument(
        "--threshold",
        action="append",
        default=[],
        metavar="[DIR=]PCT",
        help="flag changes beyond PCT percent (for one direction, or all); defaults lower=20 higher=10 either=10",
    )
    parser.add_argument("--flagged-only", action="store_true", help="list only flagged metrics in the table")
    parser.add_argument("--html", metavar="OUT.html", help="write a self-contained HTML page with one chart per metric")
    parser.add_argument("--png", metavar="DIR", help="write one PNG chart per metric into DIR (matplotlib)")
    parser.add_argument(
        "--check", action="store_true", help="exit 1 when a metric is flagged or a test is flaky (for CI)"
    )


def _load_config(project_root: Path) -> dict[str, Any]:
    pyproject = project_root / "pyproject.toml"
    if not pyproject.is_file():
        return {}
    try:
        data = tomllib.loads(pyproject.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ReportError(f"cannot read {pyproject}: {exc}") from None
    section = data.get("tool", {}).get("testharness", {}).get("report", {})
    return section if isinstance(section, dict) else {}


def run(args: argparse.Namespace, cwd: Path | None = None) -> int:
    """Execute the report command; ReportError for bad input (the caller prints it)."""
    root = find_project_root(cwd or Path.cwd())
    book = apply_cli_rules(rulebook_from_config(_load_config(root)), args.direction, args.threshold)
    if args.last < 0:
        raise ReportError(f"--last must be 0 (all) or a positive number of runs, got {args.last}")
    history = load_history(resolve_history_dir(args.history_dir, root), last=args.last or None)
    if not history.runs:
        for warning in history.warnings:
            print(f"warning: {warning}", file=sys.stderr)
        raise ReportError(
            f"no results history in {history.directory}: run the unit tests first (bash tests/run_unit.sh)"
        )
    trends = compute_trends(history.runs, book, args.test, args.metric)
    if (args.test or args.metric) and not trends:
        raise ReportError("no numeric metric matches the --test/--metric patterns given")
    flaky = find_flaky(history.runs)
    print_report(history, trends, flaky, args.flagged_only)
    if args.html:
        out = Path(args.html)
        write_text_atomic(out, render_html(history, trends, flaky, "Test history report"))
        print(f"wrote {out} ({len(trends)} chart(s))")
    if args.png:
        written = write_pngs(trends, Path(args.png))
        print(f"wrote {len(written)} PNG chart(s) to {args.png}")
    if args.check and (any(t.flagged for t in trends) or flaky):
        return 1
    return 0


def main(argv: Iterable[str] | None = None) -> int:
    """`python tools/py/testharness/report.py [options]`: the report command on its own."""
    parser = argparse.ArgumentParser(
        prog="testharness report", description=__doc__.splitlines()[0] if __doc__ else None
    )
    add_arguments(parser)
    args = parser.parse_args(list(argv) if argv is not None else None)
    try:
        return run(args)
    except ReportError as exc:
        print(f"testharness report: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
