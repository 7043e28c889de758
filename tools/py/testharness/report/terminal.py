"""The report in the terminal: rich tables of runs, metric trends and flaky tests."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from testharness.history import History
from testharness.report.flaky import FlakyTest
from testharness.report.trends import Trend, format_change, format_value, trend_changes


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
