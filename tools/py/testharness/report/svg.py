"""A chart `Scene` as inline SVG (the HTML page's charts): one element per shape, styled inline."""

from __future__ import annotations

from html import escape

from testharness.report.chart import STYLES, Dot, Line, Polyline, Rect, Scene, Shape


def _style_attrs(cls: str) -> str:
    style = STYLES[cls]
    attrs = [f'class="{cls}"']
    attrs.append(f'fill="{style.fill}"' if style.fill else 'fill="none"')
    if style.stroke:
        attrs.append(f'stroke="{style.stroke}" stroke-width="{style.stroke_width:g}"')
    if style.dash:
        attrs.append(f'stroke-dasharray="{" ".join(f"{d:g}" for d in style.dash)}"')
    if style.font_px:
        attrs.append(f'font-size="{style.font_px:g}" text-anchor="{style.anchor}"')
        if style.monospace:
            attrs.append('font-family="monospace"')
        if style.bold:
            attrs.append('font-weight="600"')
    return " ".join(attrs)


def _element(shape: Shape) -> str:
    attrs = _style_attrs(shape.cls)
    if isinstance(shape, Rect):
        return f'<rect x="{shape.x:g}" y="{shape.y:g}" width="{shape.width:g}" height="{shape.height:g}" {attrs}/>'
    if isinstance(shape, Line):
        return f'<line x1="{shape.x1:g}" y1="{shape.y1:g}" x2="{shape.x2:g}" y2="{shape.y2:g}" {attrs}/>'
    if isinstance(shape, Polyline):
        points = " ".join(f"{x:g},{y:g}" for x, y in shape.points)
        return f'<polyline points="{points}" {attrs}/>'
    if isinstance(shape, Dot):
        return f'<circle cx="{shape.x:g}" cy="{shape.y:g}" r="{shape.r:g}" {attrs}><title>{escape(shape.tip)}</title></circle>'
    rotate = f" rotate({-shape.rotate:g})" if shape.rotate else ""  # SVG turns clockwise
    place = f'transform="translate({shape.x:g},{shape.y:g}){rotate}"'
    return f"<text {place} {attrs}>{escape(shape.text)}</text>"


def scene_svg(scene: Scene) -> str:
    """A standalone `<svg>` element (fetches nothing; styles are attributes, not a stylesheet)."""
    head = (
        f'<svg class="chart-svg" xmlns="http://www.w3.org/2000/svg" width="{scene.width}" height="{scene.height}" '
        f'viewBox="0 0 {scene.width} {scene.height}" role="img" aria-label="{escape(scene.title)}" '
        'font-family="system-ui,sans-serif">'
    )
    return "\n".join([head, *(_element(shape) for shape in scene.shapes), "</svg>"])
