"""What a warm Ray worker gives an actor that imports torch and transformers
(issue 36, item 2): the time from `Actor.remote()` to its first answer, in a new worker
process (what every policy actor pays today) and in a process Ray started for this job
beforehand, whose set-up hook already imported those modules.

    uv run --group test python bench/warm_worker_probe.py [--actors 3]
    PYTHONPATH=/tmp/site:$PWD python3 bench/warm_worker_probe.py      # the GPU machine (no uv)

The warm half prestarts with the harness's call (tools/py/testharness/warm_workers.py: the
raylet's private `NodeManagerService.PrestartWorkers`, with the job's runtime environment), as
the unit tests' xdist workers do (tests/unit/conftest.py). Each half runs in a fresh
cluster of its own; both install the same `worker_process_setup_hook`, so a cold actor's
process imports the modules in its set-up and its constructor finds them imported, as a warm
one does.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

# As the unit tests' sessions: no idle worker per CPU, and workers run this interpreter (under
# `uv run` Ray would otherwise start each one through uv, with the checkout as working_dir).
os.environ.setdefault("RAY_prestart_worker_first_driver", "0")
os.environ.setdefault("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")

import ray

from testharness.warm_workers import preload, prestart

WARM_WAIT_S = 120.0  # for the first prestarted worker to finish its set-up
SETTLE_S = 10.0  # then for the others (Ray may start fewer than asked: the table says which)


def _make_hook(marks: str) -> Any:
    def hook() -> None:  # runs in every worker process of the job before its first task
        preload()
        Path(marks, str(os.getpid())).touch()

    return hook


@ray.remote(num_cpus=1)
class _Imports:
    """The policy worker's imports (already done where the set-up hook ran)."""

    def __init__(self) -> None:
        preload()

    def pid(self) -> int:
        return os.getpid()


def _half(warm: bool, actors: int) -> list[tuple[float, bool]]:
    """(seconds to the first answer, whether the actor got a prestarted process) per actor."""
    with tempfile.TemporaryDirectory(prefix="warm_probe_") as marks:
        ray.init(num_cpus=actors + 1, include_dashboard=False, log_to_driver=False,
                 runtime_env={"worker_process_setup_hook": _make_hook(marks)})  # fmt: skip
        try:
            if warm:
                assert prestart(actors), "this Ray cannot prestart workers"
                deadline, seen = time.monotonic() + WARM_WAIT_S, 0
                while seen < actors and time.monotonic() < deadline:
                    time.sleep(0.1)
                    if (now := len(os.listdir(marks))) > seen:
                        seen, deadline = now, time.monotonic() + SETTLE_S
            prestarted = {int(p) for p in os.listdir(marks)}
            rows = []
            for _ in range(actors):
                t0 = time.perf_counter()
                actor = _Imports.remote()  # type: ignore[attr-defined]
                pid = ray.get(actor.pid.remote())
                rows.append((time.perf_counter() - t0, pid in prestarted))
                ray.kill(actor)
            return rows
        finally:
            ray.shutdown()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--actors", type=int, default=3, help="actors per half (default 3)")
    args = parser.parse_args()
    import torch
    import transformers

    print(f"Ray {ray.__version__}, torch {torch.__version__}, transformers {transformers.__version__}, "
          f"{os.cpu_count()} CPUs")  # fmt: skip
    print("| half | actor | process | seconds to its first answer |")
    print("|---|---|---|---|")
    medians = {}
    for warm in (False, True):
        rows = _half(warm, args.actors)
        name = "warm (prestarted, imports done)" if warm else "cold (new process)"
        for i, (seconds, prestarted) in enumerate(rows):
            print(f"| {name} | {i} | {'prestarted' if prestarted else 'new'} | {seconds:.2f} |")
        medians[name] = statistics.median(s for s, _ in rows)
    print()
    for name, seconds in medians.items():
        print(f"median {name}: {seconds:.2f} s")


if __name__ == "__main__":
    main()
