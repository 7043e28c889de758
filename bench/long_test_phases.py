"""Where the library suite's two long tests spend their wall time (issue 36, item 2).

Each test runs alone in a fresh pytest (as the first test of a serial run would: it pays for
Ray's start, its imports, its actors), with bench/long_test_probe first on PYTHONPATH: every
process of the run (pytest, Ray's workers and actors) writes what it timed, and this script
turns the spans into exclusive seconds per phase:

  test process   pytest's start-up, Ray start/join and shutdown, the policy workers' start and
                 stop, train steps, generation, logprobs, validation, checkpoint save/load,
                 the reward environment, the logger, imports, and the untimed rest; these rows
                 add up to the process's wall time
  policy actors  inside "wait for the actors' constructors": each actor process from its
                 creation to the end of its constructor (interpreter start, Ray's worker set-up,
                 imports, torch.distributed, model load), summed over the test's actors

    uv run --group test python bench/long_test_phases.py [--repeat N] [--docs] [--save F] [--before F] [TEST ...]
    PYTHONPATH=/tmp/site:$PWD python3 bench/long_test_phases.py      # a machine without uv

Prints one table (median of --repeat runs, seconds); --docs also writes it to
docs/benchmarks.md, section "long-test-phases" (or --section NAME). --save FILE keeps the medians;
--before FILE (an earlier --save, e.g. of the commit before a change) puts them beside this run's.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _bench_common import (  # noqa: E402
    LONG_TEST_PROBE,
    ROOT,
    checkout_env,
    machine,
    md_table,
    print_table,
    today,
    update_section,
)

SECTION = "long-test-phases"
TESTS = (
    "tests/unit/algorithms/test_grpo.py::test_one_grpo_step_through_ray",
    "tests/unit/algorithms/test_sft.py::test_sft_example_loss_falls_and_resumes",
)
ACTOR_CTOR = "actor constructor (DTensorPolicyWorker)"
ACTOR_REINIT = "actor reinit for a new run (DTensorPolicyWorker.reinit)"
ENV_SCORE = "reward env actor: score"
PYTEST = ("pytest setup", "pytest call", "pytest teardown")

Span = dict[str, Any]


# ---------------------------------------------------------------- the probe's log (pure)


def self_times(spans: Iterable[Span]) -> list[tuple[Span, float]]:
    """Each span with its exclusive time: its duration less that of the spans nested in it
    (same process and thread, contained in time)."""
    out: list[tuple[Span, float]] = []
    by_thread: dict[tuple[int, int], list[Span]] = defaultdict(list)
    for s in spans:
        by_thread[(s["pid"], s.get("tid", 0))].append(s)
    for group in by_thread.values():
        group.sort(key=lambda s: (s["start"], -s["end"]))
        own = {id(s): s["end"] - s["start"] for s in group}
        stack: list[Span] = []
        for s in group:
            while stack and stack[-1]["end"] <= s["start"]:
                stack.pop()
            if stack and s["end"] <= stack[-1]["end"] + 1e-6:
                own[id(stack[-1])] -= s["end"] - s["start"]
            stack.append(s)
        out += [(s, max(own[id(s)], 0.0)) for s in group]
    return out


def phase_seconds(records: Sequence[dict[str, Any]], wall: float) -> dict[str, float]:
    """{row: seconds} for one run: the test process's rows (adding up to its wall), the policy
    actors' rows (`actors: ...`, from each one's creation to the end of its constructor) and
    counts (`n ...`)."""
    procs = {r["pid"]: r for r in records if r.get("proc")}
    exits = {r["pid"]: r["exit"] for r in records if "exit" in r}
    spans = [r for r in records if "label" in r]
    driver_pid = next((s["pid"] for s in spans if s["label"] in PYTEST), None)
    rows: dict[str, float] = defaultdict(float)
    rows["bench: pytest subprocess wall"] = wall
    if driver_pid is None:
        return dict(rows)
    timed = self_times(spans)
    driver = [(s, t) for s, t in timed if s["pid"] == driver_pid]
    first = min(s["start"] for s, _ in driver if s["label"] in PYTEST)
    last = max(s["end"] for s, _ in driver if s["label"] in PYTEST)
    created = float(procs.get(driver_pid, {}).get("create", first))
    rows["pytest start-up (interpreter, plugins, collection)"] = first - created
    for s, t in driver:
        if s["label"] in PYTEST:
            rows[f"{s['label']}: the rest (fixtures, test code, harness)"] += t
        elif s["start"] >= first - 1e-6 and s["end"] <= last + 1e-6:
            rows[s["label"]] += t
    if driver_pid in exits:
        rows["pytest after the test (session end, results, exit)"] = exits[driver_pid] - last
        rows["test process wall (create to exit)"] = exits[driver_pid] - created
    ctors = [s for s in spans if s["label"] == ACTOR_CTOR]
    rows["n policy actor processes started"] = len({s["pid"] for s in ctors})
    rows["n policy actor (re)initialisations (runs)"] = sum(1 for s in spans if s["label"] == ACTOR_REINIT)
    for ctor in ctors:  # each actor process: creation to the end of its constructor (its thread)
        mine = [(s, t) for s, t in timed if s["pid"] == ctor["pid"] and s.get("tid") == ctor.get("tid")]
        proc = procs.get(ctor["pid"], {})
        site = float(proc.get("site", ctor["start"]))
        rows["actors: process start until Python runs"] += site - float(proc.get("create", site))
        before = 0.0
        for s, t in mine:
            if s["end"] <= ctor["start"] + 1e-6:
                rows[f"actors: before the constructor: {s['label']}"] += t
                before += t
            elif s["start"] >= ctor["start"] - 1e-6 and s["end"] <= ctor["end"] + 1e-6:
                label = "constructor: the rest" if s is ctor else s["label"]
                rows[f"actors: {label}"] += t
        rows["actors: Ray worker set-up (untimed, until the constructor)"] += ctor["start"] - site - before
        rows["actors: total (creation to constructor end)"] += ctor["end"] - float(proc.get("create", site))
    workers = {p for p, r in procs.items() if "default_worker.py" in str(r.get("argv", ""))}
    busy = {s["pid"] for s in spans if s["pid"] in workers and not s["label"].startswith("import ")}
    rows["n reward env actor processes"] = len({s["pid"] for s in spans if s["label"] == ENV_SCORE})
    rows["n Ray worker processes with no timed work (idle, tasks)"] = len(workers - busy)
    return dict(rows)


# ---------------------------------------------------------------- running the tests


def run_one(test: str, python: str) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="long_test_") as tmp:
        log = Path(tmp) / "spans.jsonl"
        env = checkout_env(LONG_TEST_LOG=str(log))
        env["PYTHONPATH"] = os.pathsep.join([str(LONG_TEST_PROBE), env["PYTHONPATH"]])
        env.pop("PYTEST_ADDOPTS", None)
        cmd = [python, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--unit-results-dir", tmp, test]
        began = time.time()
        proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, check=False)
        wall = time.time() - began
        if proc.returncode != 0:
            sys.stderr.write(proc.stdout[-4000:] + proc.stderr[-4000:])
            raise SystemExit(f"{test} failed (exit {proc.returncode})")
        records = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
        return phase_seconds(records, wall)


def _group(row: str) -> int:
    """Row order: the walls, the test process's phases, the actors' phases, the counts."""
    if row.startswith("bench:"):
        return 0
    if row.startswith("test process wall"):
        return 1
    if row.startswith("actors: total"):
        return 3
    if row.startswith("actors:"):
        return 4
    if row.startswith("n "):
        return 5
    return 2


def medians(results: dict[str, list[dict[str, float]]]) -> dict[str, dict[str, float]]:
    """{test: {row: median over that test's runs}}."""
    return {
        test: {
            row: statistics.median(run[row] for run in runs if row in run) for row in {r for run in runs for r in run}
        }
        for test, runs in results.items()
    }


def table(
    now: dict[str, dict[str, float]], before: dict[str, dict[str, float]] | None = None
) -> tuple[list[str], list[list[str]]]:
    """Rows: every phase seen, largest first within its group; a column per test (with a
    `before` column beside it when given); blank where a test has no such phase."""
    columns = [(test, now) for test in now]
    if before:
        columns = [c for test in now for c in ((test, before), (test, now))]
    header = ["phase (exclusive seconds)"]
    header += [
        f"{t.rpartition('::')[2]}{(' before' if m is before else ' after') if before else ''}" for t, m in columns
    ]
    rows_seen = {row for m in (now, before or {}) for per_test in m.values() for row in per_test}

    def biggest(row: str) -> float:
        return max((m.get(t, {}).get(row, 0.0) for t, m in columns), default=0.0)

    rows = []
    for row in sorted(rows_seen, key=lambda r: (_group(r), -biggest(r), r)):
        cells = [row]
        for test, m in columns:
            value = m.get(test, {}).get(row)
            cells.append("" if value is None else f"{value:g}" if row.startswith("n ") else f"{value:.2f}")
        rows.append(cells)
    return header, rows


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("tests", nargs="*", default=list(TESTS), help="pytest node ids (default: the two long tests)")
    ap.add_argument("--repeat", type=int, default=1, help="runs of each test; the table shows the median")
    ap.add_argument("--python", default=sys.executable, help="the interpreter to run pytest with")
    ap.add_argument("--docs", action="store_true", help="also write the table to docs/benchmarks.md")
    ap.add_argument("--section", default=SECTION, help=f"docs/benchmarks.md section (default {SECTION})")
    ap.add_argument("--note", default="", help="a line to put above the table in the docs (e.g. the commit)")
    ap.add_argument("--save", type=Path, help="write the medians (and every run's rows) to this JSON file")
    ap.add_argument("--before", type=Path, help="a --save file of an earlier run: shown beside this one")
    args = ap.parse_args(argv)

    load_before = os.getloadavg()[0]
    results: dict[str, list[dict[str, float]]] = {}
    for test in args.tests:
        for i in range(args.repeat):
            run = run_one(test, args.python)
            results.setdefault(test, []).append(run)
            print(f"{test} run {i + 1}: {run['bench: pytest subprocess wall']:.1f} s", flush=True)
    now = medians(results)
    if args.save:
        args.save.write_text(json.dumps({"medians": now, "runs": results}, indent=1) + "\n")
    before = json.loads(args.before.read_text())["medians"] if args.before else None
    header, rows = table(now, before)
    print_table("Long tests: where the wall time goes", header, rows)
    text = (
        f"Measured {today()} on {machine()} (load {load_before:.1f} before), "
        f"{args.repeat} run(s) of each test, median; `{' '.join([Path(args.python).name, *sys.argv])}`."
    )
    print(text)
    print(md_table(header, rows))  # to paste where --docs would not fit
    if args.docs:
        body = "\n".join(
            [
                "## The two long tests, phase by phase (bench/long_test_phases.py, issue 36)",
                "",
                *([args.note, ""] if args.note else []),
                text,
                "",
                md_table(header, rows),
            ]
        )
        update_section(args.section, body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
