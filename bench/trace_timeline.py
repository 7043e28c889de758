"""Where a `-n` run's wall went, process by process, from a timeline that bench/long_test_probe
wrote (`bench/edit_to_result.py --trace --logs DIR` keeps one per run as NN_RUN.trace.jsonl).

    python bench/trace_timeline.py DIR/02_edit_...trace.jsonl [--min 0.3]

Seconds count from the creation of the run's first process (the pytest controller). For each
pytest process (the controller and its xdist workers): when it was created, when it began
and ended collecting, each test (setup, call, teardown) and, inside a test, its longest
timed calls; its exit. For each Ray worker process that ran an actor constructor or a warm
worker's imports: created, imports, the constructor, and whether its imports were done
before the constructor began (warm). Then the run's critical path: the last test to end,
and what came before it on its worker.
"""

from __future__ import annotations

import argparse
import sys
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _bench_common import read_probe  # noqa: E402

PYTEST_STEPS = ("pytest setup", "pytest call", "pytest teardown")
PRELOAD = "warm worker: its imports (preload)"
CONSTRUCTOR = "actor constructor"
RUN_PHASES = (  # a pytest process's own, outside its tests
    "pytest collection",
    "Ray start/join (ray.init)",
    "warm workers: ask the raylet (prestart)",
    "Ray shutdown (ray.shutdown)",
)


def role(argv: str) -> str:
    """ "controller" (`python -m pytest ...`: Python shows `-m` as the first argument while
    site runs, or a `pytest` script), "xdist worker" (execnet's `python -c`), or ""."""
    first = argv.split(" ", 1)[0]
    if first == "-m" or first.endswith("pytest"):
        return "controller"
    return "xdist worker" if first == "-c" else ""


def spans_by_pid(records: Sequence[dict[str, Any]]) -> dict[int, list[dict[str, Any]]]:
    out: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for r in records:
        if "label" in r:
            out[r["pid"]].append(r)
    for spans in out.values():
        spans.sort(key=lambda s: (s["start"], -s["end"]))
    return out


def merged_imports(spans: Sequence[dict[str, Any]], t0: float, min_s: float) -> list[str]:
    """Outermost import spans of one process, summed per package (many short ones add up)."""
    total: dict[str, float] = defaultdict(float)
    for s in spans:
        if s["label"].startswith("import ") and s["depth"] == 0:
            total[s["label"]] += s["end"] - s["start"]
    return [f"{label} {sec:.2f}" for label, sec in sorted(total.items(), key=lambda kv: -kv[1]) if sec >= min_s]


def describe(records: Sequence[dict[str, Any]], min_s: float = 0.3) -> list[str]:
    procs = {r["pid"]: r for r in records if r.get("proc")}
    exits = {r["pid"]: r["exit"] for r in records if "exit" in r}
    spans = spans_by_pid(records)
    if not procs:
        return ["no process records: was bench/long_test_probe first on PYTHONPATH?"]
    pytest_pids = [p for p, r in procs.items() if role(str(r.get("argv", "")))]
    t0 = (
        min(float(procs[p]["create"]) for p in pytest_pids)
        if pytest_pids
        else min(float(r["create"]) for r in procs.values())
    )

    def at(t: float) -> str:
        return f"{t - t0:6.2f}"

    out: list[str] = []
    last_test: tuple[float, int, str] | None = None
    for pid in sorted(pytest_pids, key=lambda p: procs[p]["create"]):
        mine = spans.get(pid, [])
        steps = [s for s in mine if s["label"] in PYTEST_STEPS]
        out.append(
            f"{role(str(procs[pid].get('argv', '')))} pid {pid}: created {at(procs[pid]['create'])}, Python from {at(procs[pid]['site'])}"
        )
        for s in mine:
            in_test = any(t["start"] <= s["start"] and s["end"] <= t["end"] for t in steps)
            if s["label"] in RUN_PHASES and not in_test:
                out.append(f"  {at(s['start'])} - {at(s['end'])}  {s['label']} ({s['end'] - s['start']:.2f} s)")
        imports = merged_imports([s for s in mine if not steps or s["end"] <= steps[0]["start"]], t0, min_s)
        if imports:
            out.append("  before the first test: " + ", ".join(imports))
        tests: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for s in steps:
            tests[s.get("what", "")].append(s)
        for nodeid, parts in sorted(tests.items(), key=lambda kv: kv[1][0]["start"]):
            begin, end = parts[0]["start"], max(p["end"] for p in parts)
            each = ", ".join(f"{p['label'].split()[1]} {p['end'] - p['start']:.2f}" for p in parts)
            out.append(f"  {at(begin)} - {at(end)}  {nodeid} ({end - begin:.2f} s: {each})")
            inner = [s for s in mine if s["label"] not in PYTEST_STEPS and begin <= s["start"] and s["end"] <= end]
            for s in inner:
                if s["end"] - s["start"] >= min_s and s["depth"] <= 2:
                    out.append(f"      {at(s['start'])} - {at(s['end'])}  {s['label']} ({s['end'] - s['start']:.2f} s)")
            if last_test is None or end > last_test[0]:
                last_test = (end, pid, nodeid)
        if pid in exits:
            out.append(f"  exit {at(exits[pid])}")
    actors = []
    for pid, mine in spans.items():
        ctor = next((s for s in mine if s["label"].startswith(CONSTRUCTOR) and s["depth"] == 0), None)
        preload = next((s for s in mine if s["label"] == PRELOAD), None)
        if ctor is None and preload is None:
            continue
        actors.append((pid, ctor, preload))
    if actors:
        out.append("Ray worker processes (actors and warm workers):")
    for pid, ctor, preload in sorted(actors, key=lambda a: procs.get(a[0], {}).get("create", 0.0)):
        proc = procs.get(pid, {})
        line = f"  pid {pid}: created {at(proc.get('create', t0))}"
        if preload is not None:
            line += f", preload {at(preload['start'])} - {at(preload['end'])}"
        if ctor is not None:
            warm = preload is not None and preload["end"] <= ctor["start"]
            line += (
                f", {ctor['label']} {at(ctor['start'])} - {at(ctor['end'])} ({ctor['end'] - ctor['start']:.2f} s, "
                + ("warm)" if warm else "cold)")
            )
            before = merged_imports([s for s in spans[pid] if s["end"] <= ctor["start"]], t0, min_s)
            if before and not warm:
                line += "; before it: " + ", ".join(before)
        else:
            line += ", no actor"
        out.append(line)
    if last_test is not None:
        end, pid, nodeid = last_test
        ctrl_exit = max((exits[p] for p in pytest_pids if p in exits), default=end)
        out.append(f"last test to end: {nodeid} on pid {pid} at {at(end)}; the run ended at {at(ctrl_exit)}")
    return out


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("trace", type=Path, help="a trace.jsonl from bench/edit_to_result.py --trace")
    ap.add_argument("--min", type=float, default=0.3, help="hide timed calls shorter than this (seconds)")
    args = ap.parse_args(argv)
    print("\n".join(describe(read_probe(args.trace), args.min)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
