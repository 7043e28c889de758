"""Warm Ray workers (testharness.warm_workers, as tests/unit/conftest.py asks for them) with the
library's worker groups, on a real cluster: a job that asks for them gets idle processes that imported torch and transformers before any actor existed, a
worker group of one starts its actor in one of them, as rank 0 of 1, so does a rank of a larger
group (its rank's variables come with its constructor), and the job's later worker processes
import nothing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]

# A driver of its own (a new job of the session's cluster): warm workers are asked for when a
# job connects. It waits until the raylet's two prestarted processes of this job have torch
# loaded, then starts a group of one and a group of two and reports where their actors ran.
DRIVER = textwrap.dedent(
    """
    import json, os, sys, time
    import ray
    from testharness import warm_workers
    from nemo_rl.distributed.ray_cluster import init_ray, job_runtime_env
    from nemo_rl.distributed.virtual_cluster import RayVirtualCluster
    from nemo_rl.distributed.worker_group import RayWorkerGroup, init_distributed

    class Facts:
        def __init__(self):
            self.imported_before = "transformers" in sys.modules and "torch.distributed.tensor" in sys.modules
            init_distributed()

        def facts(self):
            import torch.distributed as dist
            return {"pid": os.getpid(), "imported_before": self.imported_before,
                    "rank": dist.get_rank(), "world": dist.get_world_size()}

    init_ray(runtime_env=warm_workers.with_preload_hook(job_runtime_env()))
    assert warm_workers.prestart(2)
    job = ray.get_runtime_context().get_job_id()

    def warm_pids():
        pids = []
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                env = open(f"/proc/{pid}/environ", "rb").read().split(b"\\0")
                maps = open(f"/proc/{pid}/maps", "rb").read()
            except OSError:
                continue
            if f"RAY_JOB_ID={job}".encode() in env and b"libtorch_cpu" in maps:
                pids.append(int(pid))
        return pids

    deadline = time.monotonic() + 240
    while len(warm := warm_pids()) < 2:
        assert time.monotonic() < deadline, f"{len(warm)} of 2 prestarted workers of this job imported torch"
        time.sleep(0.2)
    time.sleep(1)  # the rest of the hook: transformers
    runs = []
    for size in (1, 2):  # the group of one takes a warm worker; one is left for the group of two
        group = RayWorkerGroup(RayVirtualCluster(size, cpus_per_worker=0.5), Facts)
        try:
            runs.append(group.run_all("facts"))
        finally:
            group.shutdown()
    print("FACTS " + json.dumps({"runs": runs, "warm": warm}))
    """
)


def test_groups_start_in_warm_workers_with_their_imports_done(ray_cluster) -> None:
    env = dict(os.environ, RAY_ADDRESS=ray_cluster.address)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    done = subprocess.run(
        [sys.executable, "-c", DRIVER], cwd=ROOT, env=env, capture_output=True, text=True, timeout=480
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith("FACTS ")]
    assert done.returncode == 0 and lines, done.stderr[-3000:]
    facts = json.loads(lines[0].removeprefix("FACTS "))
    (one,), pair = facts["runs"]
    assert one["pid"] in facts["warm"], facts  # a prestarted process, not a new one
    assert one["imported_before"], facts  # its constructor found torch and transformers imported
    assert (one["rank"], one["world"]) == (0, 1)
    assert [(r["rank"], r["world"]) for r in pair] == [(0, 2), (1, 2)], facts  # one process group
    warm, cold = sorted(pair, key=lambda r: r["pid"] not in facts["warm"])
    assert warm["pid"] in facts["warm"] and warm["imported_before"], facts  # the other warm process
    # A process the job started later claimed no slot: it imported nothing it was not asked to.
    assert cold["pid"] not in facts["warm"] and not cold["imported_before"], facts


@pytest.mark.num_gpus(1)  # on a CPU machine there is no CUDA to leave alone
def test_preload_leaves_cuda_uninitialised() -> None:
    """A warm worker imports before Ray gives it an actor and sets CUDA_VISIBLE_DEVICES: had
    the imports initialised CUDA, the actor would see every GPU of the machine. So the
    variable set after the imports must still decide what CUDA shows (here: no GPU)."""
    code = (
        "import os; from testharness.warm_workers import preload; preload(); "
        "os.environ['CUDA_VISIBLE_DEVICES'] = ''; import torch; "
        "print(torch.cuda.device_count())"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split()[-1] == "0"


def test_the_suite_asks_for_warm_workers_only_where_cores_are_left(monkeypatch: pytest.MonkeyPatch) -> None:
    """The default: the cores beyond one per xdist worker, at most 3 each; NRL_WARM_WORKERS
    decides when set."""
    from tests.unit import conftest

    monkeypatch.delenv("NRL_WARM_WORKERS", raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: 16)  # the H200 machine
    assert [conftest.warm_workers_wanted(w) for w in (1, 4, 5, 8, 16)] == [3, 3, 2, 1, 0]
    monkeypatch.setattr(os, "cpu_count", lambda: 2)  # the CPU box
    assert [conftest.warm_workers_wanted(w) for w in (1, 2)] == [1, 0]
    monkeypatch.setattr(os, "cpu_count", lambda: 128)  # a machine of 8 GPUs: the same rule
    assert conftest.warm_workers_wanted(4) == 3
    monkeypatch.setenv("NRL_WARM_WORKERS", "2")
    assert conftest.warm_workers_wanted(4) == 2
    monkeypatch.setenv("NRL_WARM_WORKERS", "two")
    with pytest.raises(pytest.UsageError, match="whole number"):
        conftest.warm_workers_wanted(4)
