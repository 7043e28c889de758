"""The one chart renderer: a trend's Scene (pure), written as SVG and drawn as PNG."""

from __future__ import annotations

import struct
import sys
import xml.etree.ElementTree as ET
from datetime import datetime
from pathlib import Path

import pytest

from testharness.report.chart import Dot, Label, Line, Polyline, chart_scene, format_ticks, make_charts, nice_ticks
from testharness.report.png import SCALE, write_png
from testharness.report.rules import ReportError, RuleBook
from testharness.report.svg import scene_svg
from testharness.report.trends import Trend, compute_trends
from testharness.results import Run

SVG = "{http://www.w3.org/2000/svg}"


def run(day: int, values: dict[str, float], commit: str = "") -> Run:
    return Run(
        path=Path(f"{day}.json"),
        start_time=f"2026-03-{day:02d} 10:00:00",
        started=datetime(2026, 3, day, 10),
        git_commit=commit or f"{day:x}" * 40,
        exit_status=0,
        metrics={"test_m::test_t": values},
        tests={},
    )


def trend_of(metric: str, values: list[float], days: list[int] | None = None) -> Trend:
    runs = [run(d, {metric: v}) for d, v in zip(days or range(1, len(values) + 1), values, strict=False)]
    (trend,) = compute_trends(runs, RuleBook())
    return trend


def test_ticks_are_round_and_cover_the_values() -> None:
    assert nice_ticks(11.9, 18.0) == [10.0, 12.0, 14.0, 16.0, 18.0]
    assert nice_ticks(5.0, 5.0)[0] < 5.0 < nice_ticks(5.0, 5.0)[-1]  # a flat series still gets a span
    assert format_ticks([1.0, 2.0, 3.0]) == ["1", "2", "3"]
    assert format_ticks([1.000003, 1.000004]) == ["1.000003", "1.000004"]  # neighbours stay apart


def test_the_scene_has_a_dot_per_run_and_flags_the_latest() -> None:
    trend = trend_of("_elapsed", [12.0, 12.4, 11.9, 18.0])
    assert trend.flagged
    scene = chart_scene(trend)
    dots = [s for s in scene.shapes if isinstance(s, Dot)]
    assert [d.cls for d in dots] == ["pt", "pt", "pt", "pt flagged"]
    (series,) = [s for s in scene.shapes if isinstance(s, Polyline)]
    assert series.points == tuple((d.x, d.y) for d in dots)
    assert dots[-1].y < dots[0].y  # up on screen is a bigger value
    # x follows start time: day 1 at the left edge of the plot, day 4 at the right.
    assert (dots[0].x, dots[-1].x) == (70, 620)
    assert [s for s in scene.shapes if isinstance(s, Line) and s.cls == "best"]  # lower is better: a best line


def test_no_best_line_without_a_preferred_direction_and_a_caption_on_request() -> None:
    trend = trend_of("loss", [2.0, 1.9])
    scene = chart_scene(trend)
    assert not [s for s in scene.shapes if isinstance(s, Line) and s.cls == "best"]
    captioned = chart_scene(trend, caption="test_m::test_t · loss")
    assert [s.text for s in captioned.shapes if isinstance(s, Label) and s.cls == "caption"] == [
        "test_m::test_t · loss"
    ]
    assert captioned.height > scene.height


def test_crowded_commit_labels_are_thinned_but_the_latest_is_kept() -> None:
    # Forty runs over one day and one run a month later: the first forty crowd one spot.
    trend = trend_of("loss", [1.0] * 40 + [2.0], days=[1] * 40 + [28])
    labels = [s for s in chart_scene(trend).shapes if isinstance(s, Label) and s.cls == "xtick"]
    assert 1 < len(labels) < 41
    assert labels[-1].text == trend.points[-1].run.short_commit


def test_svg_writes_every_shape_of_the_scene() -> None:
    trend = trend_of("_elapsed", [12.0, 12.4, 18.0])
    scene = chart_scene(trend)
    root = ET.fromstring(scene_svg(scene))
    assert len(list(root)) == len(scene.shapes)
    circles = root.findall(f"{SVG}circle")
    assert [c.get("class") for c in circles] == ["pt", "pt", "pt flagged"]
    assert circles[-1].get("fill") == "#cf222e"  # styled inline: the SVG stands alone
    assert root.find(f"{SVG}polyline").get("class") == "series"  # type: ignore[union-attr]


def test_svg_escapes_text() -> None:
    trend = trend_of("m<x>", [1.0, 2.0])
    assert "m<x>" not in scene_svg(chart_scene(trend, caption="m<x>"))


def test_png_draws_the_scene_at_its_size(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib", reason="the png extra (matplotlib) is part of the test group")
    scene = chart_scene(trend_of("_elapsed", [12.0, 18.0]), caption="c")
    target = tmp_path / "c.png"
    write_png(scene, target)
    data = target.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", data[16:24])
    assert (width, height) == (scene.width * SCALE, scene.height * SCALE)
    assert [p.name for p in tmp_path.iterdir()] == ["c.png"]  # no temp file left


def test_png_without_matplotlib_is_a_one_line_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    with pytest.raises(ReportError, match=r"--png needs matplotlib: install testharness\[png\]"):
        write_png(chart_scene(trend_of("x", [1.0])), tmp_path / "x.png")
    assert not list(tmp_path.iterdir())


def test_chart_slugs_are_unique_and_file_safe() -> None:
    runs = [run(1, {"a/b": 1.0, "a_b": 2.0})]
    slugs = [c.slug for c in make_charts(compute_trends(runs, RuleBook()))]
    assert slugs == ["test_m_test_t__a_b", "test_m_test_t__a_b_2"]
