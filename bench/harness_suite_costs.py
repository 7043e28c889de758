"""Where the harness suite's time goes (issue 60): its 30 slowest tests, each with what it
started and waited for.

Runs a suite once (by default the harness's own, `pytest -n 2 tools/py/tests`, as CI does)
with bench/phase_probe first on PYTHONPATH. Every process of the run logs what it timed and
which outer test started it (the probe's PHASE_TEST, inherited by a test's subprocesses, their
Ray clusters and Ray's workers), so each test's wall time (set-up to teardown, module fixtures
included where they were set up) is shown beside:

  nested pytest   pytest processes the test started at any depth (pytester subprocesses,
                  run_unit.sh's pytest, their xdist workers), count and summed life
  Ray starts      ray.init calls in the test's process and in the processes it started
  Ray workers     Ray worker processes started for it (actors and tasks: each one an
                  interpreter start plus Ray's set-up)
  sleep           time.sleep of 50 ms or more on the test process's main thread (fixed waits,
                  polls)
  child CPU       CPU seconds of the processes it started that exited normally

    uv run --group test python bench/harness_suite_costs.py [--top 30] [--docs] [-- PYTEST ARGS]
    uv run --group test python bench/harness_suite_costs.py -- -n 2 tests/repo

Prints the table and per-category totals; --docs writes them to docs/benchmarks.md, section
"harness-suite-costs". The run's results go to a temporary directory.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
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

SECTION = "harness-suite-costs"
DEFAULT_ARGS = ["-n", "2", "tools/py/tests"]
HEADER = ["test", "wall s", "nested pytest (n, s)", "Ray starts (n, s)", "Ray workers", "sleep s", "child CPU s"]


def run_suite(args: list[str], log: Path, results: Path) -> tuple[int, float]:
    path = [str(PHASE_PROBE), str(ROOT), str(ROOT / "tools" / "py"), os.environ.get("PYTHONPATH", "")]
    env = {**os.environ, "PHASE_LOG": str(log), "PYTHONPATH": os.pathsep.join(p for p in path if p)}
    env["TESTHARNESS_RESULTS_DIR"] = str(results)  # not the project's history
    began = time.perf_counter()
    code = subprocess.call([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args], cwd=ROOT, env=env)
    return code, time.perf_counter() - began


def costs(records: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Per outer test: its wall time and what it started, from the probe's records."""
    out: dict[str, dict[str, float]] = {}
    pid_of: dict[str, int] = {}
    for r in records:
        if r.get("phase") == TEST_PHASE and "test" not in r and r.get("what"):
            out[r["what"]] = defaultdict(float, wall=r["end"] - r["start"])
            pid_of[r["what"]] = r["pid"]
    for r in records:
        row = out.get(r.get("test", ""))
        if row is None:
            continue
        span = r["end"] - r["start"]
        phase = r.get("phase")
        if phase == "pytester subprocess (nested pytest)":
            row["pytest_n"] += 1
            row["pytest_s"] += span
        elif phase == "ray start/join (ray.init)":
            row["ray_n"] += 1
            row["ray_s"] += span
        elif phase == "sleep (main thread)" and r["pid"] == pid_of[r["test"]]:
            row["sleep_s"] += span
        elif phase == "process life":
            row["child_cpu_s"] += float(r.get("cpu") or 0.0)
            if r.get("kind") == "Ray worker":
                row["ray_workers"] += 1
    return out


def table_rows(per_test: dict[str, dict[str, float]], top: int) -> list[list[object]]:
    slowest = sorted(per_test.items(), key=lambda kv: -kv[1]["wall"])[:top]
    return [
        [
            nodeid,
            f"{c['wall']:.1f}",
            f"{int(c['pytest_n'])}, {c['pytest_s']:.1f}",
            f"{int(c['ray_n'])}, {c['ray_s']:.1f}",
            int(c["ray_workers"]),
            f"{c['sleep_s']:.1f}",
            f"{c['child_cpu_s']:.1f}",
        ]
        for nodeid, c in slowest
    ]


def totals(per_test: dict[str, dict[str, float]]) -> list[list[object]]:
    def total(key: str) -> float:
        return sum(c[key] for c in per_test.values())

    return [
        ["tests", len(per_test)],
        ["summed test wall s", f"{total('wall'):.0f}"],
        ["nested pytest processes (n, summed life s)", f"{int(total('pytest_n'))}, {total('pytest_s'):.0f}"],
        ["Ray starts (n, summed s)", f"{int(total('ray_n'))}, {total('ray_s'):.0f}"],
        ["Ray worker processes", int(total("ray_workers"))],
        ["sleep on test main threads s", f"{total('sleep_s'):.0f}"],
        ["CPU of the processes tests started s", f"{total('child_cpu_s'):.0f}"],
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--top", type=int, default=30)
    parser.add_argument("--docs", action="store_true", help=f"write docs/benchmarks.md, section {SECTION}")
    parser.add_argument("pytest_args", nargs="*", help="after --: the suite and its options")
    ns = parser.parse_args(argv)
    args = ns.pytest_args or DEFAULT_ARGS
    with tempfile.TemporaryDirectory(prefix="suite_costs.") as tmp:
        log = Path(tmp) / "probe.jsonl"
        code, wall = run_suite(args, log, Path(tmp) / "results")
        per_test = costs(read_probe(log))
    head = f"`pytest {' '.join(args)}`: exit {code}, {wall:.0f} s wall; {today()}, {machine()}"
    rows, sums = table_rows(per_test, ns.top), totals(per_test)
    print_table(f"The {ns.top} slowest tests: {head}", HEADER, rows)
    print_table("Totals", ["what", "value"], sums)
    if ns.docs:
        body = "\n\n".join(
            [
                f"## Where the harness suite's time goes (bench/harness_suite_costs.py)\n\n{head}.",
                md_table(HEADER, rows),
                md_table(["what", "value"], sums),
            ]
        )
        update_section(SECTION, body)
    return code


if __name__ == "__main__":
    sys.exit(main())
