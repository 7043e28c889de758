"""What `testharness run-unit` does (and a project's thin run_unit.sh, as this repository's
tests/run_unit.sh), in testable Python: flags, Ray cluster discovery, GPU count, test assets,
the pytest command (what pytest's exit code means for the script: testharness.exit_codes).

`python -m testharness.unit_runner [run-unit flags] [pytest args | paths]`; a wrapper script
names itself in the help with $TESTHARNESS_PROG.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from testharness import ci_report
from testharness.exit_codes import INTERRUPTED, USAGE_ERROR
from testharness.history import HISTORY_ENV, RESULTS_DIR_ENV
from testharness.requirements import first_option_problem
from testharness.results import DATED_DIR, RESULTS_NAME
from testharness.settings import MarkerGroup, Settings, SettingsError, load_settings
from testharness.supervisor import judge, supervise
from testharness.upstream_paths import has_path_arg, map_upstream_paths

PROG_ENV = "TESTHARNESS_PROG"  # what the user runs, for the help (a wrapper script names itself)
DEFAULT_PROG = "testharness run-unit"


def usage(groups: Sequence[MarkerGroup] = (), prog: str | None = None) -> str:
    """run-unit's help, named as the user runs it (`prog`, default $TESTHARNESS_PROG, else
    `testharness run-unit`); the marker-group options (pytest's, from [tool.testharness]) listed too."""
    prog = prog or os.environ.get(PROG_ENV) or DEFAULT_PROG
    flags = "".join(f"[{g.option}] " for g in groups)
    lines = [
        f"usage: {prog} {flags}[--rerun-failures N]",
        " " * len(f"usage: {prog} ") + "[--shard I/N] [--shard-plan] [--junitxml FILE] [pytest args | paths ...]",
        "",
    ]
    for g in groups:
        text = f"{'run only' if g.only else 'also run'} tests marked {g.name}"
        if g.requires_name:
            text += f" (needs {g.requires_name}" + (f": {g.hint})" if g.hint else ")")
        lines.append(f"  {g.option:<18}  {text}")
    exclusive = [g.option for g in groups if g.exclusive]
    if len(exclusive) > 1:
        lines.append(f"  ({', '.join(exclusive)}: one at a time)")
    lines += [
        "  --rerun-failures N  rerun a failing test up to N times (pytest-rerunfailures --reruns N)",
        "  --shard I/N         run shard I of N (balanced on past durations); --shard-plan prints it",
        "  --shard-id I --num-shards N   the same, in pytest-shard's form: I counts from 0 (--shard I+1/N)",
        "  --junitxml FILE     JUnit XML of the run's record (crashed tests included), for CI",
        "  -h, --help          this help",
        "Every other argument goes to pytest (e.g. -k EXPR, -m EXPR, -x, FILE.py, FILE.py::TEST).",
        "Without paths the test roots run ([tool.testharness] test_roots, else pytest's testpaths).",
    ]
    return "\n".join(lines)


class UsageError(Exception):
    """Bad run_unit.sh arguments (one-line message)."""


@dataclass
class Plan:
    """What to run: pytest arguments after run_unit.sh's own flags were translated."""

    pytest_args: list[str] = field(default_factory=list)
    show_help: bool = False
    junitxml: Path | None = None  # written from the final record (ci_report), not by pytest


def parse_args(argv: list[str]) -> Plan:
    """Translate run_unit.sh's own flags; everything else passes to pytest untouched."""
    plan = Plan()
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg in ("-h", "--help"):
            plan.show_help = True
        elif arg in JUNIT_OPTIONS or arg.startswith(tuple(f"{o}=" for o in JUNIT_OPTIONS)):
            # Each pytest round would write (and the next overwrite) its own file, and a round
            # that dies writes none: the file is made from the run's one record at the end.
            if "=" in arg:
                value = arg.split("=", 1)[1]
            else:
                i += 1
                value = argv[i] if i < len(argv) else ""
            if not value:
                raise UsageError(f"{arg.split('=')[0]} needs a file path, e.g. --junitxml=unit.xml")
            plan.junitxml = Path(value)
        elif arg == "--rerun-failures" or arg.startswith("--rerun-failures="):
            if "=" in arg:
                value = arg.split("=", 1)[1]
            else:
                i += 1
                if i >= len(argv):
                    raise UsageError("--rerun-failures needs a number, e.g. --rerun-failures 2")
                value = argv[i]
            if not value.isdigit():
                raise UsageError(f"--rerun-failures needs a whole number >= 0, got {value!r}")
            plan.pytest_args += ["--reruns", value]
        elif arg in ("-n", "--numprocesses") or arg.startswith("--numprocesses=") or arg[:2] == "-n":
            # pytest-xdist takes -n -1, which the plan first ran as no workers and then every
            # test in-process: a whole number, auto or logical, else refused here.
            if arg in ("-n", "--numprocesses"):
                i += 1
                value = argv[i] if i < len(argv) else ""
            else:
                value = arg.partition("=")[2] if arg.startswith("--") else arg[2:].removeprefix("=")
            if not (value.isdigit() or value in ("auto", "logical")):
                raise UsageError(f"-n needs a number of workers (0 or more), auto or logical, got {value!r}")
            plan.pytest_args += ["-n", value]
        else:
            plan.pytest_args.append(arg)
        i += 1
    return plan


JUNIT_OPTIONS = ("--junitxml", "--junit-xml")


def pytest_command(plan: Plan, settings: Settings, cwd: Path) -> list[str]:
    args = map_upstream_paths(plan.pytest_args, cwd, settings.test_roots, settings.root)
    if not has_path_arg(args, cwd):
        args += [os.path.relpath(r, cwd) for r in settings.test_roots]
    # A test file that cannot be collected fails the run (2, named in the last line) without
    # holding the other files back, serially as under -n (xdist runs them): a tree copied from
    # upstream, with files that need code this library lacks, still runs this project's suite.
    return [sys.executable, "-m", "pytest", "--durations=15", "--continue-on-collection-errors", *args]


# --- Ray and GPUs ------------------------------------------------------------------------


def discover(env: dict[str, str]) -> tuple[str | None, int]:
    """(Ray address to join or None, GPUs available to the tests): $RAY_ADDRESS, else this
    machine's `ray start` head; that cluster's GPUs, else this machine's."""
    from testharness import gpu, real_ray

    address = env.get("RAY_ADDRESS") or real_ray.local_head_address()
    count = None
    if address:
        try:
            count = real_ray.gpus_of_cluster_at(address)
        except Exception as exc:  # noqa: BLE001  any Ray error joining: said in one line, this machine's count instead
            print(f"run_unit: could not join the Ray cluster at {address}: {exc}", file=sys.stderr)
    if count is None:
        count = gpu.local_gpu_count()
    return address, count


# --- the CI files, checked before the run ---------------------------------------------------


def _option_values(args: Sequence[str], name: str) -> list[str]:
    """The values given to pytest's option `name` (`NAME VALUE` or `NAME=VALUE`)."""
    values = [a.split("=", 1)[1] for a in args if a.startswith(f"{name}=")]
    return values + [args[i + 1] for i, a in enumerate(args[:-1]) if a == name]


def ci_output_problems(plan: Plan, settings: Settings, environ: Mapping[str, str]) -> tuple[str | None, str | None]:
    """(why --junitxml's path is refused, why $GITHUB_STEP_SUMMARY's is), one line each or None,
    before anything runs: neither may be the record or a history file (where the settings,
    --unit-results-dir or $TESTHARNESS_RESULTS_DIR send them, --history-dir or
    $TESTHARNESS_HISTORY_DIR), a directory, a FIFO or another non-regular file, or unwritable."""
    results = [settings.results_dir, *map(Path, _option_values(plan.pytest_args, "--unit-results-dir"))]
    results += [Path(environ[RESULTS_DIR_ENV])] if environ.get(RESULTS_DIR_ENV) else []
    history = [d / DATED_DIR for d in results] + [*map(Path, _option_values(plan.pytest_args, "--history-dir"))]
    history += [Path(environ[HISTORY_ENV])] if environ.get(HISTORY_ENV) else []
    records = [d / RESULTS_NAME for d in results]
    junit = summary = None
    if plan.junitxml is not None:
        reason = ci_report.output_problem(plan.junitxml, records, history)
        junit = None if reason is None else f"--junitxml {plan.junitxml} {reason}"
    step = environ.get(ci_report.SUMMARY_ENV)
    if step:
        reason = ci_report.output_problem(Path(step), records, history, make_dirs=False)
        summary = None if reason is None else f"${ci_report.SUMMARY_ENV} ({step}) {reason}"
    return junit, summary


def build_assets(settings: Settings) -> int:
    """Run the asset script (`assets_script`, none by default) when the assets dir is missing
    or empty, or on every run when none is set; 0 on success or skip."""
    script, assets = settings.assets_script, settings.assets_dir
    if script is None:
        return 0
    if assets is not None and assets.is_dir() and any(assets.iterdir()):
        return 0
    if not script.is_file():
        print(f"run_unit: no {script.name}; not building test assets")
        return 0
    print(f"run_unit: test assets missing, building them: python {script}")
    return subprocess.call([sys.executable, str(script)], cwd=settings.root)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    cwd = Path.cwd()
    root = Path(os.environ.get("TESTHARNESS_ROOT", cwd))
    try:
        settings = load_settings(root)
    except SettingsError as exc:
        print(f"run_unit: {exc}", file=sys.stderr)
        return 2
    try:
        plan = parse_args(argv)
    except UsageError as exc:  # the reason last: the line a user sees at the end of the output
        print(f"{usage(settings.marker_groups)}\nrun_unit: {exc}", file=sys.stderr)
        return 2
    if plan.show_help:
        print(usage(settings.marker_groups))
        return 0
    # e.g. --mcore-only without megatron-core, or with --vllm-only: one line, before Ray or pytest start.
    problem = first_option_problem(plan.pytest_args, settings.marker_groups)
    if problem is not None:
        print(f"run_unit: {problem}", file=sys.stderr)
        return 2
    env = dict(os.environ)
    # A CI file that would replace the record, hang its writer or fail at the end: one line now.
    junit_problem, summary_problem = ci_output_problems(plan, settings, env)
    if junit_problem is not None:
        print(f"run_unit: {junit_problem}", file=sys.stderr)
        return 2  # a bad flag's code, as parse_args's refusals
    if summary_problem is not None:  # the environment's, not the command's: the tests still run
        print(f"run_unit: warning: no step summary: {summary_problem}", file=sys.stderr)
    if env.get("TESTHARNESS_NO_DISCOVERY") != "1":  # the harness's own tests skip Ray here
        address, gpus = discover(env)
        if address:
            env["RAY_ADDRESS"] = address
            print(f"run_unit: joining the Ray cluster at {address}")
        else:
            print("run_unit: no running Ray cluster found; the test session will start one")
        env["TESTHARNESS_NUM_GPUS"] = str(gpus)
        print(f"run_unit: GPUs found: {gpus}" + (" (CPU mode)" if gpus == 0 else ""))
        if build_assets(settings) != 0:
            print("run_unit: building the test assets failed (see above)", file=sys.stderr)
            return 1
    if sum(arg in ("--version", "-V") for arg in plan.pytest_args) == 1:
        # pytest answers a lone --version before it loads any plugin: nothing to supervise.
        return subprocess.call([sys.executable, "-m", "pytest", "--version"], env=env)
    with tempfile.TemporaryDirectory(prefix="run_unit_") as tmp:
        cmd = pytest_command(plan, settings, cwd)
        print("run_unit: " + " ".join(cmd[1:]), flush=True)
        run = supervise(cmd, env, Path(tmp))
        code = run.code
        status, message = judge(run)
    refused = code == USAGE_ERROR and status != USAGE_ERROR  # pytest refused its arguments: the usage
    if not refused:
        # This run's own dated copy: the latest unit_results.json may be another run's by now.
        results = (run.summary or {}).get("results_copy")
        results = results if isinstance(results, str) and results else None
        for problem in ci_report.write_unit_outputs(
            plan.junitxml, results, run.summary, message, summary_problem is None
        ):
            print(f"run_unit: {problem}", file=sys.stderr)
    if refused:
        print(usage(settings.marker_groups), file=sys.stderr)
    print(message, file=sys.stderr if status else sys.stdout)
    return status


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:  # Ctrl-C before pytest started (Ray discovery, assets)
        print("run_unit: interrupted before the tests started", file=sys.stderr)
        sys.exit(INTERRUPTED)
