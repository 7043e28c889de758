"""Wall time of the default unit suite (`bash tests/run_unit.sh`), with its slowest tests.

Runs the suite ONCE and prints: wall time, pytest's own time, tests per outcome, how many
Ray clusters were started (one Ray session directory is created per start, counted in a
fresh RAY_TMPDIR), and the 15 slowest test phases from `--durations=15`.

    uv run --group test python bench/suite_time.py                 # default configuration
    uv run --group test python bench/suite_time.py -- -k dtensor   # extra run_unit.sh args
    python3 bench/suite_time.py --no-uv                            # no uv: python3 + PYTHONPATH

Results of the run go to a temporary directory (not tests/unit/unit_results), so a bench
run does not enter the project's results history.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _bench_common import ROOT, machine, md_table, print_table, today, update_section  # noqa: E402

SECTION = "suite-time"
TARGET_CPU_S = 8 * 60
TARGET_GPU_S = 4 * 60
DURATION_RE = re.compile(r"^\s*([0-9.]+)s\s+(setup|call|teardown)\s+(\S.*)$")
FINAL_RE = re.compile(r"^=+ (.*) in ([0-9.]+)s(?: \([0-9:]+\))? =+$")
RAY_LINE = "Started a local Ray instance"


@dataclass
class SuiteRun:
    wall_s: float
    exit_code: int
    pytest_s: float | None = None
    summary: str = ""
    outcomes: dict[str, int] = field(default_factory=dict)
    slowest: list[tuple[float, str, str]] = field(default_factory=list)
    ray_sessions: int = 0
    ray_lines: int = 0


def parse_output(text: str) -> tuple[float | None, str, list[tuple[float, str, str]]]:
    """(pytest seconds, pytest's final summary, [(seconds, phase, node id)] of --durations)."""
    pytest_s, summary = None, ""
    slowest: list[tuple[float, str, str]] = []
    in_durations = False
    for line in text.splitlines():
        if "slowest" in line and "durations" in line and line.startswith("="):
            in_durations = True
            continue
        m = FINAL_RE.match(line.strip())
        if m:
            summary, pytest_s = m.group(1), float(m.group(2))
            in_durations = False
            continue
        if in_durations:
            d = DURATION_RE.match(line)
            if d:
                slowest.append((float(d.group(1)), d.group(2), d.group(3).strip()))
            elif line.startswith("="):
                in_durations = False
    return pytest_s, summary, slowest


def count_outcomes(results_file: Path) -> dict[str, int]:
    try:
        data = json.loads(results_file.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    counts: dict[str, int] = {}
    for rec in (data.get("tests") or {}).values():
        counts[rec.get("outcome", "?")] = counts.get(rec.get("outcome", "?"), 0) + 1
    return counts


def count_ray_sessions(ray_tmp: Path) -> int:
    """Ray makes one `session_<date>_<pid>` dir per started cluster (joining makes none)."""
    return sum(1 for p in ray_tmp.rglob("session_2*") if p.is_dir() and not p.is_symlink())


def run_suite(use_uv: bool, python: str, extra: list[str], timeout: int) -> SuiteRun:
    ray_tmp = Path(tempfile.mkdtemp(prefix="ray_suite_", dir="/tmp"))  # short: Ray socket paths
    results_dir = Path(tempfile.mkdtemp(prefix="suite_results_"))
    env = dict(os.environ, RAY_TMPDIR=str(ray_tmp), TESTHARNESS_RESULTS_DIR=str(results_dir))
    if use_uv:
        cmd = ["uv", "run", "--group", "test", "bash", "tests/run_unit.sh", *extra]
    else:
        cmd = ["bash", "tests/run_unit.sh", *extra]
        env["PYTHON"] = python
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [".", "tools/py", env.get("PYTHONPATH", "")]))
    print("suite_time: " + " ".join(cmd), flush=True)
    lines: list[str] = []
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        assert proc.stdout is not None
        for line in proc.stdout:  # tee: the user sees progress, we keep the text
            sys.stdout.write(line)
            lines.append(line)
        code = proc.wait(timeout=timeout)
    except (subprocess.TimeoutExpired, KeyboardInterrupt):
        proc.kill()
        proc.wait()
        code = -1
    wall = time.perf_counter() - t0
    text = "".join(lines)
    pytest_s, summary, slowest = parse_output(text)
    run = SuiteRun(wall_s=wall, exit_code=code, pytest_s=pytest_s, summary=summary, slowest=slowest)
    run.outcomes = count_outcomes(results_dir / "unit_results.json")
    run.ray_sessions = count_ray_sessions(ray_tmp)
    run.ray_lines = text.count(RAY_LINE)
    shutil.rmtree(results_dir, ignore_errors=True)
    shutil.rmtree(ray_tmp, ignore_errors=True)
    return run


def render(run: SuiteRun, cmd_line: str, gpu: bool) -> tuple[str, list[list[object]], list[list[object]]]:
    target = TARGET_GPU_S if gpu else TARGET_CPU_S
    n = sum(run.outcomes.values())
    outcome_txt = ", ".join(f"{v} {k}" for k, v in sorted(run.outcomes.items())) or "(no results file)"
    verdict = "met" if run.wall_s <= target and run.exit_code == 0 else (
        f"MISSED by {run.wall_s - target:.0f} s" if run.wall_s > target else f"suite exit {run.exit_code}"
    )
    summary_rows: list[list[object]] = [
        ["wall time (run_unit.sh, incl. start-up)", f"{run.wall_s:.1f} s"],
        ["pytest time", f"{run.pytest_s:.1f} s" if run.pytest_s is not None else "?"],
        ["tests", f"{n} ({outcome_txt})"],
        ["Ray clusters started", f"{run.ray_sessions} (target 1)"],
        ["target", f"<= {target // 60} min wall ({'H200' if gpu else '2-core CPU'}): {verdict}"],
        ["pytest summary", run.summary or "?"],
    ]
    slow_rows: list[list[object]] = [[f"{s:.2f} s", phase, node] for s, phase, node in run.slowest]
    body = [
        "## Unit suite wall time (bench/suite_time.py)",
        "",
        f"Measured {today()} on {machine()}, with `{cmd_line}` (the suite ran once; other jobs "
        "may have shared the machine, see the load figure).",
        "",
        md_table(["", "value"], summary_rows),
        "",
        "Ray starts are Ray session directories created in a fresh RAY_TMPDIR: every `ray.init` "
        "that starts a cluster counts, including the harness's own pytester tests that start one "
        "on purpose (tests/unit/tools/test_tracker.py::test_coverage_includes_code_run_in_ray_actors).",
        "",
        "Slowest 15 test phases (`--durations=15`):",
        "",
        md_table(["time", "phase", "test"], slow_rows),
    ]
    return "\n".join(body) + "\n", summary_rows, slow_rows


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    extra: list[str] = []
    if "--" in argv:
        i = argv.index("--")
        argv, extra = argv[:i], argv[i + 1 :]
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--no-uv", action="store_true", help="run with --python and PYTHONPATH=.:tools/py")
    ap.add_argument("--python", default="python3", help="interpreter with --no-uv (default python3)")
    ap.add_argument("--timeout", type=int, default=3600, help="seconds before the suite is killed")
    ap.add_argument("--no-docs", action="store_true", help="print only; do not touch docs/benchmarks.md")
    args = ap.parse_args(argv)
    if not args.no_uv and shutil.which("uv") is None:
        print("suite_time: uv not found; use --no-uv (and --python PATH)", file=sys.stderr)
        return 2
    run = run_suite(not args.no_uv, args.python, extra, args.timeout)
    if args.no_uv:
        cmd_line = f"PYTHONPATH=.:tools/py {args.python} bench/suite_time.py --no-uv"
    else:
        cmd_line = "uv run --group test python bench/suite_time.py"
    if extra:
        cmd_line += " -- " + " ".join(extra)
    gpu = "no GPU" not in machine()
    body, summary_rows, slow_rows = render(run, cmd_line, gpu)
    print_table("Unit suite", ["", "value"], summary_rows)
    print_table("Slowest 15", ["time", "phase", "test"], slow_rows)
    if not args.no_docs:
        update_section(SECTION, body)
    return 0 if run.exit_code == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
