"""Metric checks on the command line: the "Metric Checks" table, the JSON report, exit codes.

    testharness check-metrics METRICS.json 'data["train/loss"]["9"] < 1500' [...] [--table-width N] [--json OUT]
    uv run tests/check_metrics.py METRICS.json ...     # the same command (a thin entry point)

Exit 0 when every check passes, 1 when one fails, 2 on bad input (one line on stderr).
A thin layer over `checks.evaluator`, which does the evaluating.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

from testharness.atomic_io import write_json_atomic
from testharness.checks.evaluator import CheckResult, run_checks, safe_repr
from testharness.checks.whitelist import function_names

DEFAULT_PIPED_WIDTH = 200  # table width when stdout is not a terminal
MIN_TABLE_WIDTH = 20


class MetricsFileError(Exception):
    """The metrics file is missing or is not a JSON object (the message is one line)."""


def load_metrics(path: str | Path) -> dict[str, Any]:
    """Load the metrics JSON; MetricsFileError with a one-line reason otherwise."""
    p = Path(path)
    if not p.is_file():
        raise MetricsFileError(f"metrics file not found: {p}")
    try:
        data = json.loads(p.read_text())
    except (OSError, UnicodeDecodeError) as exc:
        raise MetricsFileError(f"cannot read metrics file {p}: {exc}") from None
    except json.JSONDecodeError as exc:
        raise MetricsFileError(f"metrics file {p} is not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise MetricsFileError(f"metrics file {p} must hold a JSON object, got {type(data).__name__}")
    return data


def format_value(value: Any) -> str:
    """Value column text: `N/A` when there is none."""
    if value is None:
        return "N/A"
    try:
        return str(value)
    except Exception:  # noqa: BLE001 - e.g. an int beyond the int->str digit limit
        return safe_repr(value)


def _cells(result: CheckResult) -> tuple[str, str, str, str]:
    return ("PASS" if result.passed else "FAIL", result.check, format_value(result.value), result.reason)


def render_table(results: Sequence[CheckResult], width: int | None = None, file: TextIO | None = None) -> None:
    """Print the "Metric Checks" rich table (Status, Check, Value, Message)."""
    try:
        from rich.console import Console
        from rich.table import Table
        from rich.text import Text
    except ImportError:  # a bare interpreter: same columns, plain text
        render_plain(results, file=file)
        return
    table = Table(title="Metric Checks")
    table.add_column("Status", style="bold", no_wrap=True)
    table.add_column("Check")
    table.add_column("Value", style="cyan")
    table.add_column("Message", style="italic")
    for result in results:
        status, check, value, reason = _cells(result)
        # Text, not markup: checks are full of [...] that rich would read as tags.
        table.add_row(Text(status, style="green" if result.passed else "red"), Text(check), Text(value), Text(reason))
    Console(width=width, file=file).print(table)


def render_plain(results: Sequence[CheckResult], file: TextIO | None = None) -> None:
    """The same table as plain text, for an interpreter without rich."""
    rows = [("Status", "Check", "Value", "Message"), *(_cells(r) for r in results)]
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    out = file or sys.stdout
    print("Metric Checks", file=out)
    for row in rows:
        print(" | ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=False)).rstrip(), file=out)


def json_report(metrics_file: str, results: Sequence[CheckResult]) -> dict[str, Any]:
    """The `--json` document: {metrics_file, passed, results: [{check, passed, value, message}]}."""
    return {
        "metrics_file": metrics_file,
        "passed": all(r.passed for r in results),
        "results": [{"check": r.check, "passed": r.passed, "value": r.value, "message": r.message} for r in results],
    }


def summary_line(results: Sequence[CheckResult]) -> str:
    failed = sum(not r.passed for r in results)
    return f"{len(results) - failed}/{len(results)} checks passed" + (f", {failed} FAILED" if failed else "")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("metrics", help="JSON file: {metric: {step: value}}")
    parser.add_argument("checks", nargs="+", metavar="CHECK", help="expression over data, e.g. 'max(data[\"x\"]) < 3'")
    parser.add_argument("--table-width", type=int, default=None, metavar="N", help="table width in columns")
    parser.add_argument("--json", dest="json_out", default=None, metavar="OUT", help="also write the results here")


DESCRIPTION = "Evaluate metric checks (Python expressions over `data`) against a metrics JSON."
EPILOG = (
    'Example: %(prog)s metrics.json \'data["train/loss"]["9"] < 1500\' '
    "'mean(data[\"train/loss\"], -3) < 0.5'. Functions: " + ", ".join(function_names()) + "."
)


def run(args: argparse.Namespace) -> int:
    """0 when every check passes, 1 when one fails, 2 on bad input (one line on stderr)."""
    if args.table_width is not None and args.table_width < MIN_TABLE_WIDTH:
        print(f"error: --table-width must be at least {MIN_TABLE_WIDTH}, got {args.table_width}", file=sys.stderr)
        return 2
    try:
        data = load_metrics(args.metrics)
    except MetricsFileError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    results = run_checks(data, args.checks)
    width = args.table_width
    if width is None and not sys.stdout.isatty() and "COLUMNS" not in os.environ:
        # Piped (tee, CI logs): rich would assume 80 columns and wrap every check.
        width = DEFAULT_PIPED_WIDTH
    render_table(results, width=width)
    if args.json_out:
        try:
            # NaN values stay visible (as NaN); anything json cannot encode is written as its repr.
            write_json_atomic(args.json_out, json_report(str(args.metrics), results), allow_nan=True, default=safe_repr)
        except OSError as exc:
            print(f"error: cannot write {args.json_out}: {exc}", file=sys.stderr)
            return 2
    print(summary_line(results))
    return 0 if all(r.passed for r in results) else 1


def main(argv: Sequence[str] | None = None, prog: str = "check_metrics.py") -> int:
    """The command on its own (tests/check_metrics.py)."""
    parser = argparse.ArgumentParser(prog=prog, description=DESCRIPTION, epilog=EPILOG)
    add_arguments(parser)
    return run(parser.parse_args(argv))
