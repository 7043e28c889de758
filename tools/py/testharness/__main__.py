"""The `testharness` command: `uv run testharness <subcommand> ...` (or `python -m testharness ...`).

    testharness report          metric trends, regressions and flaky tests from the results history
    testharness check-metrics   evaluate metric checks over a metrics JSON (tests/check_metrics.py)
    testharness tb-dump         TensorBoard scalars to JSON (tests/json_dump_tb_logs.py)
    testharness run-unit        what tests/run_unit.sh runs: its flags, then pytest's
    testharness explain         why --testmon selects the tests of these files (remote-aware selection)
    testharness functional      what functional scripts reach; which ones an edit affects (run_all.sh --affected)
    testharness state           save the selection state as one file, or load one (CI: select against the base branch)
    testharness port-check      whether test files brought over from upstream replace this project's

Each subcommand lives in its own module with `add_arguments(parser)` and `run(args) -> int`;
this file only wires them up. `testharness <subcommand> --help` describes each one.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence

from testharness import port_check, report, selection_state, tb_dump_cli
from testharness.checks import cli as checks_cli
from testharness.functional import cli as functional_cli
from testharness.remote_select import __main__ as explain_cli
from testharness.report import cli as report_cli

RUN_UNIT = "run-unit"


def _report(args: argparse.Namespace) -> int:
    try:
        return report.run(args)
    except report.ReportError as exc:
        print(f"testharness report: error: {exc}", file=sys.stderr)
        return 2


def _run_unit(argv: Sequence[str]) -> int:
    from testharness import unit_runner  # imported on use: it is the only one that needs it

    return unit_runner.main(list(argv))


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="testharness",
        description="Test harness commands.",
        epilog="`testharness COMMAND --help` describes each command.",
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    def add(
        name: str, summary: str, description: str, run: Callable[[argparse.Namespace], int], epilog: str | None = None
    ) -> argparse.ArgumentParser:
        sub = commands.add_parser(name, help=summary, description=description, epilog=epilog)
        sub.set_defaults(run=run)
        return sub

    summary = "metric trends, regressions and flaky tests from the results history"
    report.add_arguments(add("report", summary, report_cli.DESCRIPTION, _report))
    summary = "evaluate metric checks over a metrics JSON (exit 1 when one fails)"
    checks_cli.add_arguments(add("check-metrics", summary, checks_cli.DESCRIPTION, checks_cli.run, checks_cli.EPILOG))
    summary = "dump TensorBoard scalars to {metric: {step: value}} JSON"
    tb_dump_cli.add_arguments(add("tb-dump", summary, tb_dump_cli.DESCRIPTION, tb_dump_cli.run, tb_dump_cli.EPILOG))
    summary = "why --testmon selects the tests of these files (static closure and recorded reach)"
    explain_cli.add_arguments(add("explain", summary, explain_cli.DESCRIPTION, explain_cli.run))
    summary = "what functional scripts reach; which ones an edit affects (run_all.sh --affected)"
    functional_cli.add_arguments(add("functional", summary, functional_cli.DESCRIPTION, functional_cli.run))
    summary = "save the selection state (testmon, remote reach, functional reach) as one file, or load one"
    selection_state.add_arguments(add("state", summary, selection_state.DESCRIPTION, selection_state.run))
    summary = "whether test files brought over from another checkout (upstream's) replace this project's"
    port_check.add_arguments(add("port-check", summary, port_check.DESCRIPTION, port_check.run, port_check.EPILOG))
    # Listed for `testharness --help`; its arguments are unit_runner's own (see main()).
    commands.add_parser(
        RUN_UNIT,
        help="run the unit tests as tests/run_unit.sh does (its flags, then pytest's; --help lists them)",
        add_help=False,
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    if args_list[:1] == [RUN_UNIT]:
        # Forwarded untouched: unit_runner parses its flags and hands the rest to pytest,
        # whose options argparse here would reject or reorder. `--help` is unit_runner's.
        return _run_unit(args_list[1:])
    args = build_parser().parse_args(args_list)
    code: int = args.run(args)
    return code


if __name__ == "__main__":
    sys.exit(main())
