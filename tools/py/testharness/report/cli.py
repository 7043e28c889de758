"""`testharness report`: argument parsing and the order of things (a thin layer).

    uv run testharness report                      # tables in the terminal
    uv run testharness report --html report.html   # self-contained page, one chart per metric
    uv run testharness report --png charts/        # the same charts as PNG files (matplotlib)

Exit 0; 1 with --check when a metric is flagged or a test is flaky; 2 on bad input (one line).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from testharness.atomic_io import write_text_atomic
from testharness.history import load_history, resolve_history_dir
from testharness.project_root import find_project_root
from testharness.report.chart import chart_scene, make_charts
from testharness.report.flaky import find_flaky
from testharness.report.page import render_html
from testharness.report.png import write_png
from testharness.report.rules import CONFIG_TABLE, ReportError, apply_cli_rules, rulebook_from_config
from testharness.report.terminal import print_report
from testharness.report.trends import Trend, compute_trends
from testharness.settings import SettingsError, load_settings

DESCRIPTION = "Metric trends, regressions and flaky tests from the results history (<results_dir>/unit_results/*.json)."


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
    parser.add_argument(
        "--png",
        metavar="DIR",
        help="write one PNG chart per metric into DIR (the same charts as the HTML page; needs matplotlib)",
    )
    parser.add_argument(
        "--check", action="store_true", help="exit 1 when a metric is flagged or a test is flaky (for CI)"
    )


def write_pngs(trends: Sequence[Trend], directory: Path) -> list[Path]:
    """One PNG per trend, the same scene as its HTML chart plus its caption; the files written."""
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for chart in make_charts(trends):
        target = directory / f"{chart.slug}.png"
        write_png(chart_scene(chart.trend, caption=f"{chart.trend.key} · {chart.trend.metric}"), target)
        written.append(target)
    return written


def run(args: argparse.Namespace, cwd: Path | None = None) -> int:
    """Execute the report command; ReportError for bad input (the caller prints it)."""
    if args.last < 0:
        raise ReportError(f"--last must be 0 (all) or a positive number of runs, got {args.last}")
    root = find_project_root(cwd or Path.cwd())
    try:
        settings = load_settings(root)
        history_dir = resolve_history_dir(args.history_dir, root)
    except SettingsError as exc:
        raise ReportError(str(exc)) from None
    config_source = f"{settings.root / 'pyproject.toml'} {CONFIG_TABLE}"
    book = apply_cli_rules(rulebook_from_config(settings.report, config_source), args.direction, args.threshold)
    history = load_history(history_dir, last=args.last or None)
    if not history.runs:
        for warning in history.warnings:
            print(f"warning: {warning}", file=sys.stderr)
        raise ReportError(
            f"no results history in {history.directory}: run the tests first (a pytest run on the test roots writes it)"
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


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m testharness.report [options]`: the report command on its own."""
    parser = argparse.ArgumentParser(prog="testharness report", description=DESCRIPTION)
    add_arguments(parser)
    args = parser.parse_args(argv)
    try:
        return run(args)
    except ReportError as exc:
        print(f"testharness report: error: {exc}", file=sys.stderr)
        return 2
