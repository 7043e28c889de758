"""Wall time of the default unit suite (`bash tests/run_unit.sh`), serial and with `-n`,
where the time goes (phases), and whether both runs agree.

Runs the suite once serially and, with `--parallel N` (`auto`, `2`, ...), once with `-n N`
first (the run a short GPU lease must not lose), in the same invocation, and prints side by side: wall time, pytest's own time, tests
per outcome, Ray clusters started (one Ray session directory per start, counted in a fresh
RAY_TMPDIR), the machine's load before and after, and a phase table. It then compares the
two results files: the same tests with the same outcomes, or the differences.

Phases come from bench/phase_probe (a sitecustomize put first on PYTHONPATH: every process
of the run, Ray workers and nested pytests included, logs when it was in ray.init, CUDA
context creation, torch.distributed init, from_pretrained, a worker group's start and
shutdown, or a nested pytest) and from pytest's own setup/call/teardown durations
(`--durations=0`). "summed" adds the time of every call in every process (parallel work
counts several times); "wall covered" is the union of those intervals, i.e. how much of the
run's wall time had at least one process in that phase.

    uv run --group test python bench/suite_time.py                        # serial only
    uv run --group test python bench/suite_time.py --parallel 2           # serial and -n 2
    uv run --group test python bench/suite_time.py --parallel auto -- -k dtensor   # extra run_unit.sh args
    python3 bench/suite_time.py --no-uv --parallel auto                   # no uv: python3 + PYTHONPATH

Results of the runs go to temporary directories (not tests/unit/unit_results), so a bench
run does not enter the project's results history.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _bench_common import (  # noqa: E402
    PHASE_PROBE,
    ROOT,
    TEST_PHASE,
    machine,
    md_table,
    print_table,
    read_probe,
    today,
    update_section,
)

SECTION = "suite-time"
TARGET_CPU_S = 8 * 60
TARGET_GPU_S = 4 * 60
TARGET_GPU_PARALLEL_S = 180
DURATION_RE = re.compile(r"^\s*([0-9.]+)s\s+(setup|call|teardown)\s+(\S.*)$")
FINAL_RE = re.compile(r"^=+ (.*) in ([0-9.]+)s(?: \([0-9:]+\))? =+$")
RAY_LINE = "Started a local Ray instance"
TOOLS_TESTS = "tools/py/tests/"  # the harness's own (pytester) suite, when a run includes it
SUITE_TESTS = "tests/unit/"  # the run's own tests (nested runs' tests have other node ids)
TIMELINE_HEADER = ["test", "process", "start", "end", "took"]


@dataclass
class SuiteRun:
    label: str
    wall_s: float
    exit_code: int
    pytest_s: float | None = None
    summary: str = ""
    outcomes: dict[str, int] = field(default_factory=dict)
    slowest: list[tuple[float, str, str]] = field(default_factory=list)
    ray_sessions: int = 0
    ray_lines: int = 0
    load: tuple[float, float] = (0.0, 0.0)  # 1-minute load average before, after
    tests: dict[str, str] = field(default_factory=dict)  # node id -> outcome
    phases: list[list[object]] = field(default_factory=list)
    timeline: list[list[object]] = field(default_factory=list)


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


def read_tests(results_file: Path) -> dict[str, str]:
    """{node id: outcome} of a results file ({} if missing)."""
    try:
        data = json.loads(results_file.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return {k: str(v.get("outcome", "?")) for k, v in (data.get("tests") or {}).items()}


def count_outcomes(tests: dict[str, str]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for outcome in tests.values():
        counts[outcome] = counts.get(outcome, 0) + 1
    return counts


def count_ray_sessions(ray_tmp: Path) -> int:
    """Ray makes one `session_<date>_<pid>` dir per started cluster (joining makes none)."""
    return sum(1 for p in ray_tmp.rglob("session_2*") if p.is_dir() and not p.is_symlink())


# --- phases (pure) -------------------------------------------------------------------------


def union_s(intervals: list[tuple[float, float]]) -> float:
    """Seconds covered by at least one of the intervals."""
    total, end = 0.0, float("-inf")
    for a, b in sorted(intervals):
        if b <= end:
            continue
        total += b - max(a, end)
        end = b
    return total


def phase_rows(
    probe_lines: list[dict[str, Any]], durations: list[tuple[float, str, str]], wall_s: float
) -> list[list[object]]:
    """[phase, calls, summed s, wall covered s, % of wall] from the probe log and pytest's
    per-phase durations (the harness's own pytester tests apart from the library's tests)."""
    by_phase: dict[str, list[tuple[float, float]]] = {}
    for rec in probe_lines:
        if rec["phase"] == TEST_PHASE:
            continue  # the timeline's
        by_phase.setdefault(str(rec["phase"]), []).append((float(rec["start"]), float(rec["end"])))
    rows: list[list[object]] = []
    for phase, spans in sorted(by_phase.items(), key=lambda kv: -sum(b - a for a, b in kv[1])):
        covered = union_s(spans)
        rows.append([phase, len(spans), f"{sum(b - a for a, b in spans):.1f}", f"{covered:.1f}",
                     f"{100 * covered / wall_s:.0f}%" if wall_s else "?"])  # fmt: skip
    for when in ("setup", "call", "teardown"):
        for label, mine in (("harness tests (tools/py/tests)", True), ("library tests", False)):
            picked = [s for s, w, node in durations if w == when and node.startswith(TOOLS_TESTS) == mine]
            if picked:
                rows.append([f"pytest {when}: {label}", len(picked), f"{sum(picked):.1f}", "", ""])
    return rows


def timeline_rows(
    probe_lines: list[dict[str, Any]], t0: float, last: int = 10, min_s: float = 3.0
) -> list[list[object]]:
    """When the run's tests ran, in seconds from its start: the library's tests of `min_s` or
    more (the GPU chain on a GPU machine) and the `last` tests to end (the run's tail), by
    start time. [test, process, start, end, took]."""
    spans = [r for r in probe_lines if r["phase"] == TEST_PHASE and str(r.get("what", "")).startswith(SUITE_TESTS)]
    tail = sorted(spans, key=lambda r: -float(r["end"]))[:last]
    library = [r for r in spans if not str(r["what"]).startswith(TOOLS_TESTS) and r["end"] - r["start"] >= min_s]
    picked = {id(r): r for r in [*tail, *library]}
    return [[r["what"], r["pid"], f"{r['start'] - t0:.1f}", f"{r['end'] - t0:.1f}", f"{r['end'] - r['start']:.1f}"]
            for r in sorted(picked.values(), key=lambda r: float(r["start"]))]  # fmt: skip


def compare(a: dict[str, str], b: dict[str, str]) -> list[str]:
    """Differences between two {node id: outcome} maps, one line each ([] when they agree)."""
    lines = [f"only in the first run: {n} ({a[n]})" for n in sorted(a.keys() - b.keys())]
    lines += [f"only in the second run: {n} ({b[n]})" for n in sorted(b.keys() - a.keys())]
    lines += [f"{n}: {a[n]} vs {b[n]}" for n in sorted(a.keys() & b.keys()) if a[n] != b[n]]
    return lines


# --- running -------------------------------------------------------------------------------


def run_suite(
    label: str, use_uv: bool, python: str, extra: list[str], timeout: int, phases: bool, history: Path | None = None
) -> SuiteRun:
    ray_tmp = Path(tempfile.mkdtemp(prefix="ray_suite_", dir="/tmp"))  # short: Ray socket paths
    results_dir = Path(tempfile.mkdtemp(prefix="suite_results_"))
    probe_log = results_dir / "phases.jsonl"
    env = dict(os.environ, RAY_TMPDIR=str(ray_tmp), TESTHARNESS_RESULTS_DIR=str(results_dir))
    if history is not None:  # durations recorded by earlier runs order the files under -n
        history.mkdir(parents=True, exist_ok=True)
        env["TESTHARNESS_HISTORY_DIR"] = str(history)
    path = [str(PHASE_PROBE)] if phases else []
    if phases:
        env["PHASE_LOG"] = str(probe_log)
    if use_uv:
        cmd = ["uv", "run", "--group", "test", "bash", "tests/run_unit.sh", *extra]
    else:
        cmd = ["bash", "tests/run_unit.sh", *extra]
        env["PYTHON"] = python
        path += [str(ROOT), str(ROOT / "tools" / "py")]  # absolute: nested pytests run elsewhere
    if phases:
        cmd.append("--durations=0")  # every phase of every test (the last --durations wins)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [*path, env.get("PYTHONPATH", "")]))
    print(f"suite_time: [{label}] " + " ".join(cmd), flush=True)
    lines: list[str] = []
    load_before = os.getloadavg()[0]
    began = time.time()  # the probe's clock
    t0 = time.perf_counter()
    # A session of its own, so a run past its time (a hang keeps stdout open) is stopped whole.
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)  # fmt: skip
    fired = threading.Event()

    def overtime() -> None:
        fired.set()
        _stop_group(proc, f"[{label}] still running after {timeout} s")

    watchdog = threading.Timer(timeout, overtime)
    watchdog.start()
    try:
        assert proc.stdout is not None
        for line in proc.stdout:  # tee (durations too: a run cut short still leaves them in the log)
            sys.stdout.write(line)
            lines.append(line)
        code = proc.wait()
    except KeyboardInterrupt:
        _stop_group(proc, f"[{label}] interrupted")
        code = proc.wait()
    finally:
        watchdog.cancel()
    if fired.is_set():
        code = -1  # cut short: not the suite's own exit status
    wall = time.perf_counter() - t0
    text = "".join(lines)
    pytest_s, summary, durations = parse_output(text)
    run = SuiteRun(label=label, wall_s=wall, exit_code=code, pytest_s=pytest_s, summary=summary,
                   slowest=sorted(durations, reverse=True)[:15])  # fmt: skip
    run.load = (load_before, os.getloadavg()[0])
    run.tests = read_tests(results_dir / "unit_results.json")
    run.outcomes = count_outcomes(run.tests)
    run.ray_sessions = count_ray_sessions(ray_tmp)
    run.ray_lines = text.count(RAY_LINE)
    if phases:
        probe = read_probe(probe_log)
        run.phases = phase_rows(probe, durations, wall)
        run.timeline = timeline_rows(probe, began)
    if history is not None:
        for dated in (results_dir / "unit_results").glob("*.json"):
            shutil.copy2(dated, history / dated.name)
    shutil.rmtree(results_dir, ignore_errors=True)
    shutil.rmtree(ray_tmp, ignore_errors=True)
    return run


def _stop_group(proc: subprocess.Popen[str], why: str) -> None:
    """SIGINT to the run's process group (pytest writes its results), SIGKILL 60 s later."""
    print(f"suite_time: {why}: stopping it", flush=True)
    for signum, grace in ((signal.SIGINT, 60.0), (signal.SIGKILL, 0.0)):
        try:
            os.killpg(proc.pid, signum)
            proc.wait(timeout=grace or None)
            return
        except ProcessLookupError:
            return
        except subprocess.TimeoutExpired:
            continue


def _target(run: SuiteRun, gpu: bool) -> str:
    target = (TARGET_GPU_PARALLEL_S if "-n" in run.label else TARGET_GPU_S) if gpu else TARGET_CPU_S
    if run.exit_code != 0:
        return f"<= {target} s: suite exit {run.exit_code}"
    return f"<= {target} s: " + ("met" if run.wall_s <= target else f"MISSED by {run.wall_s - target:.0f} s")


def render(
    runs: list[SuiteRun], cmd_line: str, gpu: bool, agreement: list[str] | None
) -> tuple[str, list[list[object]]]:
    def outcomes(r: SuiteRun) -> str:
        n = sum(r.outcomes.values())
        return f"{n} (" + (", ".join(f"{v} {k}" for k, v in sorted(r.outcomes.items())) or "no results file") + ")"

    summary_rows: list[list[object]] = [
        ["wall time (run_unit.sh, incl. start-up)", *(f"{r.wall_s:.1f} s" for r in runs)],
        ["pytest time", *(f"{r.pytest_s:.1f} s" if r.pytest_s is not None else "?" for r in runs)],
        ["tests", *(outcomes(r) for r in runs)],
        ["Ray clusters started", *(str(r.ray_sessions) for r in runs)],
        ["load (1 min) before -> after", *(f"{r.load[0]:.1f} -> {r.load[1]:.1f}" for r in runs)],
        ["target", *(_target(r, gpu) for r in runs)],
        ["pytest summary", *(r.summary or "?" for r in runs)],
    ]
    header = ["", *(r.label for r in runs)]
    body = [
        "## Unit suite wall time (bench/suite_time.py)",
        "",
        f"Measured {today()} on {machine()}, with `{cmd_line}` (each configuration ran once, one "
        "after the other; other jobs may have shared the machine, see the load figures).",
        "",
        md_table(header, summary_rows),
        "",
    ]
    if agreement is not None:
        verdict = "the same tests with the same outcomes" if not agreement else f"{len(agreement)} difference(s)"
        body += [f"Results files of the two runs: {verdict}.", ""]
        body += [f"- {line}" for line in agreement[:20]]
        body += [""] if agreement else []
    for r in runs:
        if r.phases:
            body += [f"Phases, {r.label} (wall {r.wall_s:.0f} s):", "",
                     md_table(["phase", "calls", "summed", "wall covered", "% of wall"], r.phases), ""]  # fmt: skip
        if r.timeline:
            body += [f"Timeline, {r.label}: library tests of 3 s or more and the last 10 to end (s from the start):",
                     "",
                     md_table(TIMELINE_HEADER, r.timeline), ""]  # fmt: skip
    body += ["Slowest 15 test phases of the first run:", "",
             md_table(["time", "phase", "test"], [[f"{s:.2f} s", w, n] for s, w, n in runs[0].slowest])]  # fmt: skip
    return "\n".join(body) + "\n", summary_rows


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    extra: list[str] = []
    if "--" in argv:
        i = argv.index("--")
        argv, extra = argv[:i], argv[i + 1 :]
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--parallel", metavar="N", help="also run with -n N (auto, 2, ...), before the serial run")
    ap.add_argument("--only-parallel", action="store_true", help="skip the serial run")
    ap.add_argument("--no-phases", action="store_true", help="no phase probe (and no --durations=0)")
    ap.add_argument("--no-uv", action="store_true", help="run with --python and PYTHONPATH=.:tools/py")
    ap.add_argument("--python", default="python3", help="interpreter with --no-uv (default python3)")
    ap.add_argument("--timeout", type=int, default=3600, help="seconds before a suite run is killed")
    ap.add_argument("--parallel-timeout", type=int, help="the same for the -n run (default --timeout)")
    ap.add_argument("--no-docs", action="store_true", help="print only; do not touch docs/benchmarks.md")
    ap.add_argument("--section", default=SECTION, help=f"docs/benchmarks.md section to write (default {SECTION})")
    ap.add_argument("--md", type=Path, help="also write the section's text to this file")
    ap.add_argument("--history-dir", type=Path, help="results history the runs read and add to (as a checkout "
                    "keeps it: -n orders files by it); default: none, every run starts without")  # fmt: skip
    args = ap.parse_args(argv)
    if not args.no_uv and shutil.which("uv") is None:
        print("suite_time: uv not found; use --no-uv (and --python PATH)", file=sys.stderr)
        return 2
    configs = (
        [(f"-n {args.parallel}", ["-n", args.parallel, *extra], args.parallel_timeout or args.timeout)]
        if args.parallel
        else []
    )
    if not args.only_parallel:
        configs.append(("serial", extra, args.timeout))
    runs = [
        run_suite(label, not args.no_uv, args.python, x, limit, not args.no_phases, args.history_dir)
        for label, x, limit in configs
    ]
    agreement = compare(runs[0].tests, runs[1].tests) if len(runs) == 2 else None
    if args.no_uv:
        cmd_line = f"PYTHONPATH=.:tools/py {args.python} bench/suite_time.py --no-uv"
    else:
        cmd_line = "uv run --group test python bench/suite_time.py"
    if args.parallel:
        cmd_line += f" --parallel {args.parallel}" + (" --only-parallel" if args.only_parallel else "")
    if args.history_dir:
        history_runs = len(list(args.history_dir.glob("*.json"))) - len(runs)
        cmd_line += f" --history-dir DIR ({history_runs} earlier run(s) there)"
    if extra:
        cmd_line += " -- " + " ".join(extra)
    gpu = "no GPU" not in machine()
    body, summary_rows = render(runs, cmd_line, gpu, agreement)
    print_table("Unit suite", ["", *(r.label for r in runs)], summary_rows)
    for r in runs:
        if r.phases:
            print_table(f"Phases, {r.label}", ["phase", "calls", "summed", "wall covered", "% of wall"], r.phases)
        if r.timeline:
            print_table(f"Timeline, {r.label}", TIMELINE_HEADER, r.timeline)
    if agreement is not None:
        print("suite_time: results files agree (same tests, same outcomes)" if not agreement
              else "suite_time: results files differ:\n  " + "\n  ".join(agreement))  # fmt: skip
    if args.md:
        args.md.write_text(body, encoding="utf-8")
    if not args.no_docs:
        update_section(args.section, body)
    return 0 if all(r.exit_code == 0 for r in runs) and not agreement else 1


if __name__ == "__main__":
    sys.exit(main())
