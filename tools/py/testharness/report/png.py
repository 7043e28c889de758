"""A chart `Scene` as a PNG file: matplotlib draws the same shapes at the same pixel positions.

matplotlib is optional (the `png` extra); it is imported only when a PNG is asked for.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from testharness.atomic_io import replacing
from testharness.report.chart import STYLES, Dot, Label, Line, Polyline, Rect, Scene
from testharness.report.rules import ReportError

DPI = 100  # one scene pixel is one figure pixel at this dpi
SCALE = 2  # the file has twice the pixels, for sharp text on high-density screens
_POINTS_PER_PX = 72 / DPI


def _pyplot() -> Any:
    try:
        import matplotlib

        matplotlib.use("Agg")  # headless: no display needed
        import matplotlib.pyplot as plt
    except ImportError:
        raise ReportError(
            "--png needs matplotlib: install testharness[png] "
            "(in this repository: uv run --group test testharness report --png DIR)"
        ) from None
    return plt


def write_png(scene: Scene, target: Path) -> None:
    """Draw `scene` into `target` (atomically: a reader never sees half a PNG)."""
    plt = _pyplot()
    from matplotlib.patches import Circle, Rectangle

    fig = plt.figure(figsize=(scene.width / DPI, scene.height / DPI), dpi=DPI)
    ax = fig.add_axes((0, 0, 1, 1))
    ax.set_xlim(0, scene.width)
    ax.set_ylim(scene.height, 0)  # SVG's y axis points down
    ax.axis("off")
    for shape in scene.shapes:
        style = STYLES[shape.cls]
        line_style: dict[str, Any] = {"color": style.stroke, "linewidth": style.stroke_width * _POINTS_PER_PX}
        if style.dash:
            line_style["dashes"] = style.dash
        if isinstance(shape, Rect):
            ax.add_patch(
                Rectangle(
                    (shape.x, shape.y), shape.width, shape.height,
                    facecolor=style.fill or "none", edgecolor=style.stroke or "none",
                    linewidth=style.stroke_width * _POINTS_PER_PX,
                )
            )  # fmt: skip
        elif isinstance(shape, Line):
            ax.plot([shape.x1, shape.x2], [shape.y1, shape.y2], **line_style)
        elif isinstance(shape, Polyline):
            ax.plot([x for x, _ in shape.points], [y for _, y in shape.points], **line_style)
        elif isinstance(shape, Dot):
            ax.add_patch(Circle((shape.x, shape.y), shape.r, facecolor=style.fill, edgecolor="none"))
        elif isinstance(shape, Label):
            ax.text(
                shape.x, shape.y, shape.text,
                color=style.fill, fontsize=style.font_px * _POINTS_PER_PX, ha="right" if style.anchor == "end" else "left",
                va="baseline", rotation=shape.rotate, rotation_mode="anchor",
                family="monospace" if style.monospace else "sans-serif", weight="bold" if style.bold else "normal",
            )  # fmt: skip
    try:
        with replacing(target) as tmp:
            fig.savefig(tmp, format="png", dpi=DPI * SCALE)
    finally:
        plt.close(fig)
