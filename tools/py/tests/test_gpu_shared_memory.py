"""Tests beside each other under -n each read their own memory in the tracker (issue 36).

Two test files run at once in two xdist workers, each with a Ray actor in the shared cluster.
In lock step, so that neither reading is taken alone: both read, both allocate, both read
again. On a GPU (each actor holds a quarter of it) they allocate 1 GiB and 3 GiB there: a
whole-device reading would give each the sum (4 GiB); the tracker must give each its own
allocation, within 5%. On a CPU machine they allocate 1 GiB and 2.5 GiB of host memory: the
reading is the largest peak RSS among the test's own processes, so the small test must read
less than the large one holds (upstream's reading, the largest Ray worker of the machine,
would give it the large one's).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil
import pytest
from records_project import read_results, run_env, write_project
from xdist_project import Head

from testharness import gpu, gpu_processes, real_ray
from testharness.contract import gpus_shared

HOLDER = """
import os
import time
from pathlib import Path

import ray

MIB = 2**20
SYNC = Path(os.environ["SYNC_DIR"])


def step(mine: str, theirs: str) -> None:
    (SYNC / mine).touch()
    deadline = time.monotonic() + 180
    while not (SYNC / theirs).exists():
        assert time.monotonic() < deadline, f"the other test never reached {theirs}"
        time.sleep(0.05)


@ray.remote(num_gpus=0.25)
class GpuHolder:
    def __init__(self) -> None:
        import torch

        torch.zeros(1, device="cuda")  # the CUDA context first: the readings then differ by the block alone
        self.blocks = []

    def hold(self, mib: int) -> None:
        import torch

        self.blocks.append(torch.empty(mib * MIB, dtype=torch.uint8, device="cuda"))
        torch.cuda.synchronize()


@ray.remote(num_cpus=0)
class RssHolder:
    def __init__(self) -> None:
        self.blocks = []

    def hold(self, mib: int) -> None:
        self.blocks.append(bytearray(mib * MIB))  # zero-filled, so resident


def run(tracker, me: str, other: str, holder_class, mib: int) -> None:
    ray.init()  # the shared cluster (RAY_ADDRESS, exported by the harness under -n)
    try:
        holder = globals()[holder_class].remote()
        step(f"{me}_started", f"{other}_started")
        ray.get(holder.hold.remote(0))  # constructed
        step(f"{me}_ready", f"{other}_ready")
        tracker.track("before_mib", tracker.get_max_mem())
        step(f"{me}_read", f"{other}_read")
        ray.get(holder.hold.remote(mib))
        step(f"{me}_holds", f"{other}_holds")
        tracker.track("after_mib", tracker.get_max_mem())
        step(f"{me}_done", f"{other}_done")
    finally:
        ray.shutdown()
"""


def _run_pair(
    tmp_path: Path, holder_class: str, small_mib: int, large_mib: int, head: Head | None = None
) -> tuple[dict, dict, str]:
    """Run the two tests side by side, in a cluster the controller starts or in `head`'s;
    (before, after) readings by test name, and the source."""
    pytest.importorskip("ray")

    def test_file(me: str, other: str, mib: int) -> str:
        return f"from holder import run\n\n\ndef test_{me}(tracker):\n    run(tracker, {me!r}, {other!r}, {holder_class!r}, {mib})\n"

    (tmp_path / "project").mkdir()
    root = write_project(tmp_path / "project", {
        "tests/holder.py": HOLDER,
        "tests/test_small.py": test_file("small", "large", small_mib),
        "tests/test_large.py": test_file("large", "small", large_mib),
    })  # fmt: skip
    sync = tmp_path / "sync"
    sync.mkdir()
    env = run_env(root)
    env["SYNC_DIR"] = str(sync)
    if head:  # as xdist_project.env_for joins it
        env.update(RAY_ADDRESS=head.address, RAY_AUTH_MODE="token", RAY_TMPDIR=head.ray_tmpdir)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(root / "tests"), env.get("PYTHONPATH")]))
    proc = subprocess.run([sys.executable, "-m", "pytest", "-n", "2", "-p", "no:randomly", "tests"], cwd=root,
                          env=env, capture_output=True, text=True, timeout=600)  # fmt: skip
    out = proc.stdout + proc.stderr
    print(out[-4000:])
    assert proc.returncode == 0, out
    record = read_results(root)
    metrics = {key.rpartition("::")[2]: m for key, m in record["metrics"].items()}
    before = {name: m["before_mib"] for name, m in metrics.items()}
    after = {name: m["after_mib"] for name, m in metrics.items()}
    return before, after, record["memory_source"]


@pytest.mark.skipif(gpu.local_gpu_count() == 0, reason="needs a GPU (NVML sees none); run it on a GPU machine")
def test_two_tests_on_one_gpu_each_read_their_own_memory(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    before, after, source = _run_pair(tmp_path, "GpuHolder", 1024, 3072)
    growth = {name: after[name] - before[name] for name in after}
    assert growth["test_small"] == pytest.approx(1024, rel=0.05), growth
    assert growth["test_large"] == pytest.approx(3072, rel=0.05), growth
    assert source == "gpu"


def test_two_tests_on_a_cpu_machine_each_read_their_own_peak_rss(tmp_path: Path, shared_head: Head) -> None:
    if gpu.local_gpu_count():
        pytest.skip("a GPU machine: the tracker reads GPU memory there (the test above)")
    # Blocks larger than a pytest worker's own peak (560-650 MiB seen): the reading is the
    # largest process of the test, and with 200 MiB the small test read its pytest worker. The
    # run joins a cluster already running (its start is test_parallel.py's subject), where
    # other jobs' Ray workers may run too: the reading counts the test's own actors only.
    before, after, source = _run_pair(tmp_path, "RssHolder", 1024, 2560, shared_head)
    assert source == "rss"
    assert 1024 <= after["test_small"] < 2560, (before, after)  # its actor's block, not the other's
    assert after["test_large"] >= 2560, (before, after)
    assert after["test_large"] - after["test_small"] >= 1024, (before, after)


def test_a_tests_processes_are_itself_and_its_descendants() -> None:
    sleeper = [sys.executable, "-c", "import time; time.sleep(60)"]
    child = psutil.Popen([sys.executable, "-c", f"import subprocess; subprocess.run({sleeper!r})"])
    try:
        deadline = time.monotonic() + 30
        while not child.children() and time.monotonic() < deadline:
            time.sleep(0.05)
        grandchild = child.children()[0].pid
        assert {os.getpid(), child.pid, grandchild} <= gpu_processes.own_pids()
    finally:
        for proc in [*child.children(recursive=True), child]:
            proc.kill()
        child.wait()


def test_without_a_gpu_a_shared_reading_falls_back_to_rss(monkeypatch: pytest.MonkeyPatch) -> None:
    if gpu.local_gpu_count():
        pytest.skip("a GPU machine: the GPU reading is test_two_tests_on_one_gpu_each_read_their_own_memory's")
    monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", "2")
    assert gpus_shared()
    # The kernel's peak for this process, not getrusage's: an xdist worker's ru_maxrss keeps the
    # controller's peak from before its exec, which can be the larger.
    own_peak = gpu_processes.peak_rss_reader()(os.getpid())
    nodes = gpu_processes.readings()
    assert nodes is not None
    ((used, names, rss),) = nodes  # this machine, no GPU: nothing of ours on one
    assert (used, names) == ([], []) and own_peak and rss >= own_peak > 0  # this process is one of ours
    reading = gpu.max_memory()
    assert reading.source == "rss" and reading.mib >= own_peak


def test_a_tests_ray_processes_are_its_jobs_actors_by_node(ray_cluster: Any) -> None:
    """In this process's cluster (shared with this run's other tests): what is new among this
    job's actors after one is started is that actor, on this node."""
    ray = ray_cluster

    @ray.remote(num_cpus=0)
    class Sleeper:
        def pid(self) -> int:
            return os.getpid()

    job = real_ray.job_hex(ray)
    before = gpu_processes._actor_pids(ray, job)  # other tests' actors of this job, if any
    actor = Sleeper.remote()
    try:
        pid = ray.get(actor.pid.remote())
        found = gpu_processes._actor_pids(ray, job)
    finally:
        ray.kill(actor)
    new = {node: pids - before.get(node, set()) for node, pids in found.items()}
    assert {node: pids for node, pids in new.items() if pids} == {real_ray.this_node_id(ray): {pid}}, (found, before)
