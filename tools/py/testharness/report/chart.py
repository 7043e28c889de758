"""The one chart renderer: a trend becomes a `Scene` of shapes in pixel coordinates (pure).

Every layout decision (ticks, positions, labels, the best line, the flagged point, colours)
is made here once. `svg.py` writes a Scene as inline SVG for the HTML page and `png.py`
draws the same Scene with matplotlib, so the two outputs cannot drift apart.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from testharness.report.trends import Trend, format_value

WIDTH, HEIGHT = 640, 280
MARGIN_LEFT, MARGIN_RIGHT, MARGIN_TOP, MARGIN_BOTTOM = 70, 20, 16, 78
CAPTION_HEIGHT = 22  # room for the caption when the chart carries its own (PNG)
MIN_LABEL_GAP = 14  # px between commit labels under the axis; closer ones are skipped


@dataclass(frozen=True)
class Style:
    """How a shape class looks, in SVG terms (the PNG writer maps these to matplotlib)."""

    stroke: str | None = None
    fill: str | None = None
    stroke_width: float = 1.0
    dash: tuple[float, ...] = ()
    font_px: float = 0.0
    anchor: Literal["start", "end"] = "start"
    monospace: bool = False
    bold: bool = False


MUTED = "#57606a"
#: Shape class -> style. Class names stay in the SVG for the page's script and for tests.
STYLES: dict[str, Style] = {
    "plot-bg": Style(stroke="#d0d7de", fill="#fbfcfd"),
    "grid": Style(stroke="#eaeef2"),
    "best": Style(stroke="#1a7f37", dash=(4, 3)),
    "series": Style(stroke="#0969da", stroke_width=2),
    "pt": Style(fill="#0969da"),
    "pt flagged": Style(fill="#cf222e"),
    "ytick": Style(fill=MUTED, font_px=11, anchor="end"),
    "xtick": Style(fill=MUTED, font_px=11, anchor="end", monospace=True),
    "xrange": Style(fill=MUTED, font_px=11),
    "xrange end": Style(fill=MUTED, font_px=11, anchor="end"),
    "caption": Style(fill="#1f2328", font_px=13, bold=True),
}


@dataclass(frozen=True)
class Rect:
    x: float
    y: float
    width: float
    height: float
    cls: str


@dataclass(frozen=True)
class Line:
    x1: float
    y1: float
    x2: float
    y2: float
    cls: str


@dataclass(frozen=True)
class Polyline:
    points: tuple[tuple[float, float], ...]
    cls: str


@dataclass(frozen=True)
class Dot:
    x: float
    y: float
    r: float
    cls: str
    tip: str  # hover text in the page


@dataclass(frozen=True)
class Label:
    x: float  # the anchor point: text starts (or ends, per style) here, on the baseline
    y: float
    text: str
    cls: str
    rotate: float = 0.0  # degrees, counter-clockwise on screen


Shape = Rect | Line | Polyline | Dot | Label


@dataclass(frozen=True)
class Scene:
    width: int
    height: int
    title: str  # what the chart shows, for screen readers and file names
    shapes: tuple[Shape, ...]


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
    # Trim zeros the labels all share (2.00, 3.00 -> 2, 3; 2.50, 3.00 -> 2.5, 3.0).
    while decimals > 0 and all(label.endswith("0") for label in labels):
        decimals -= 1
        labels = [f"{t:.{decimals}f}" for t in ticks]
    return labels


def x_fractions(times: Sequence[datetime | None]) -> list[float]:
    """Fractions in [0, 1]: proportional to start time when every run has one, else by order."""
    if len(times) == 1:
        return [0.5]
    if all(t is not None for t in times):
        stamps = [t.timestamp() for t in times if t is not None]
        span = max(stamps) - min(stamps)
        if span > 0:
            return [(s - min(stamps)) / span for s in stamps]
    return [i / (len(times) - 1) for i in range(len(times))]


def chart_scene(trend: Trend, caption: str | None = None, width: int = WIDTH, height: int = HEIGHT) -> Scene:
    """The line chart of one trend: x = start time labelled by short commit, y = value.

    `caption` draws a title inside the chart (PNG files); the HTML page puts it beside.
    """
    top = MARGIN_TOP + (CAPTION_HEIGHT if caption else 0)
    height += CAPTION_HEIGHT if caption else 0
    left = MARGIN_LEFT
    plot_w, plot_h = width - left - MARGIN_RIGHT, height - top - MARGIN_BOTTOM
    values = [p.value for p in trend.points]
    ticks = nice_ticks(min(values), max(values))
    y_low, y_high = min(ticks[0], min(values)), max(ticks[-1], max(values))
    y_span = (y_high - y_low) or 1.0

    def y_of(value: float) -> float:
        return round(top + plot_h - (value - y_low) / y_span * plot_h, 1)

    xs = [round(left + f * plot_w, 1) for f in x_fractions([p.run.started for p in trend.points])]
    ys = [y_of(v) for v in values]
    shapes: list[Shape] = []
    if caption:
        shapes.append(Label(left, MARGIN_TOP + 4, caption, "caption"))
    shapes.append(Rect(left, top, plot_w, plot_h, "plot-bg"))
    for tick, text in zip(ticks, format_ticks(ticks), strict=True):
        y = y_of(tick)
        shapes.append(Line(left, y, left + plot_w, y, "grid"))
        shapes.append(Label(left - 6, round(y + 4, 1), text, "ytick"))
    best = trend.best
    if best is not None and len(values) > 1:
        shapes.append(Line(left, y_of(best), left + plot_w, y_of(best), "best"))
    last_label_x = -math.inf
    for i, (x, point) in enumerate(zip(xs, trend.points, strict=True)):
        if x - last_label_x >= MIN_LABEL_GAP or i == len(xs) - 1:
            last_label_x = x
            shapes.append(Label(x, top + plot_h + 12, point.run.short_commit, "xtick", rotate=40))
    first, last = trend.points[0].run.start_time, trend.points[-1].run.start_time
    shapes.append(Label(left, height - 6, first, "xrange"))
    shapes.append(Label(left + plot_w, height - 6, last, "xrange end"))
    shapes.append(Polyline(tuple(zip(xs, ys, strict=True)), "series"))
    for i, (x, y, point) in enumerate(zip(xs, ys, trend.points, strict=True)):
        flagged = i == len(xs) - 1 and trend.flagged
        tip = f"{point.run.short_commit} · {point.run.start_time} · {format_value(point.value)}"
        shapes.append(Dot(x, y, 4, "pt flagged" if flagged else "pt", tip))
    return Scene(width, height, f"{trend.key} {trend.metric}", tuple(shapes))
