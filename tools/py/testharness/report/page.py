"""The report as one self-contained HTML page: tables, one chart per metric, a filter box.

A thin layer: the numbers come from `trends`/`flaky`, the charts from `chart` (as SVG).
The page fetches nothing (a Content-Security-Policy forbids it) and reports its own script
errors in `#report-status`, which the headless-browser test reads.
"""

from __future__ import annotations

import html
from collections.abc import Sequence

from testharness.history import History
from testharness.report.chart import chart_scene, make_charts
from testharness.report.flaky import FlakyTest
from testharness.report.svg import scene_svg
from testharness.report.trends import Trend, format_change, format_value, trend_changes

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
            f"{scene_svg(chart_scene(trend))}</figure>"
        )
    parts.append("</div>")
    parts.append(f"<script>{_TAIL_JS}</script></body></html>")
    return "\n".join(parts)
