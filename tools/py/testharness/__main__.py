"""The `testharness` command: `uv run testharness report ...` (or `python -m testharness report`).

Subcommands are thin: each lives in its own module with `add_arguments(parser)` and
`run(args) -> int`, and raises an error with a one-line message for bad input.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from testharness import report


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="testharness", description="Test harness commands.")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    report_parser = commands.add_parser(
        "report",
        help="metric trends, regressions and flaky tests from the results history",
        description="Metric trends, regressions and flaky tests from tests/unit/unit_results/*.json.",
    )
    report.add_arguments(report_parser)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.command == "report":
            return report.run(args)
    except report.ReportError as exc:
        print(f"testharness {args.command}: error: {exc}", file=sys.stderr)
        return 2
    return 2  # unreachable: argparse rejects unknown commands


if __name__ == "__main__":
    sys.exit(main())
