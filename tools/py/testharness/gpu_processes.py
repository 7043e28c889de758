"""GPU memory of one test's own processes: what the tracker reads while tests share a GPU.

Under pytest-xdist several tests run at once, and with fractional GPUs several of them on one
GPU: a whole device's memory would count the others' too. A test's processes are this process,
its descendants (a child running a Ray cluster of its own included), and the Ray workers of
this process's Ray job (its actors in the shared cluster: each xdist worker is a Ray driver of
its own, so a job of its own: its actors' pids come from the GCS, and the raylet names the job
in each worker's RAY_JOB_ID, which covers its tasks too). NVML lists every process using a GPU
with the memory it holds; the reading sums ours per GPU.

NVML names processes by the host's pids. Where ours are another PID namespace's (a container
without the host's), they cannot be matched: the reading is None and the caller falls back to
whole devices. Memory held by a plain Ray task (not an actor) of this job is counted while the
task runs, like an actor's. On a node without GPUs the reading is the largest peak resident
memory among the same processes (the kernel's VmHWM), so that a CPU machine's -n run records
each test's own memory too, not the largest Ray worker's of the machine.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from testharness import real_ray

# One node: MiB per GPU held by the test's processes, GPU names, and (no GPU there) the largest
# peak RSS in MiB among those processes (0.0 where the node has GPUs).
Reading = tuple[list[float], list[str], float]


def own_pids() -> set[int]:
    """This process and all its descendants (those that have ended are not listed)."""
    import psutil

    pids = {os.getpid()}
    try:
        pids.update(p.pid for p in psutil.Process().children(recursive=True))
    except psutil.Error:  # a child ended during the walk: the others are still listed
        pass
    return pids


def peak_rss_reader() -> Callable[[int], float | None]:
    """`peak_rss_mib(pid)`: the kernel's peak resident set size of a process (VmHWM), in MiB;
    None where /proc cannot say (the process ended, or no /proc). Built in a function so that
    cloudpickle ships it by value inside the per-node readings (here and gpu._node_task)."""

    def peak_rss_mib(pid: int) -> float | None:
        try:
            with open(f"/proc/{pid}/status", encoding="ascii", errors="replace") as fh:
                for line in fh:
                    if line.startswith("VmHWM:"):  # in kB
                        return int(line.split()[1]) / 1024.0
        except OSError:  # ended since it was listed
            pass
        return None

    return peak_rss_mib


def reader() -> Any:
    """The per-node reading `read(job_hex, pids) -> (MiB per GPU, GPU names, peak RSS MiB), or
    None`. Built in a function so that cloudpickle ships it by value to a Ray task on another
    node: Ray workers need not be able to import testharness (so it reads RAY_JOB_ID itself, as
    hygiene.probe.job_of does). It imports only pynvml."""
    peak_rss_mib = peak_rss_reader()

    def read(job_hex: str | None, pids: list[int]) -> Reading | None:
        ours = set(pids)
        job = job_hex.encode("ascii") if job_hex else None

        def in_job(pid: int) -> bool:
            if job is None:
                return False
            try:
                with open(f"/proc/{pid}/environ", "rb") as fh:
                    return b"RAY_JOB_ID=" + job in fh.read().split(b"\0")
            except OSError:  # ended, or another user's: not one of ours
                return False

        def rss_reading() -> Reading:
            procs = [int(d) for d in os.listdir("/proc") if d.isdigit()]
            return [], [], max((peak_rss_mib(p) or 0.0 for p in procs if p in ours or in_job(p)), default=0.0)

        try:
            import pynvml  # type: ignore[import-untyped,unused-ignore]
        except ImportError:  # no NVML library on this node: no GPU to read
            return rss_reading()
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError:  # no driver on this node: no GPU to read
            return rss_reading()

        used: list[float] = []
        names: list[str] = []
        try:
            for i in range(pynvml.nvmlDeviceGetCount()):
                handle = pynvml.nvmlDeviceGetHandleByIndex(i)
                name = pynvml.nvmlDeviceGetName(handle)
                names.append(name.decode() if isinstance(name, bytes) else str(name))
                total = 0
                for proc in pynvml.nvmlDeviceGetComputeRunningProcesses(handle):
                    if not os.path.exists(f"/proc/{proc.pid}"):
                        return None  # NVML's pid is not one of this PID namespace's
                    if proc.pid in ours or in_job(proc.pid):
                        total += proc.usedGpuMemory or 0  # None: NVML cannot say (counted 0)
                used.append(total / (1024 * 1024))
        except pynvml.NVMLError:  # no per-process accounting here (or a GPU gone): whole devices
            return None
        finally:
            try:
                pynvml.nvmlShutdown()
            except pynvml.NVMLError:
                pass
        return (used, names, 0.0) if names else rss_reading()

    return read


def _actor_pids(ray: Any, job_hex: str) -> dict[str, set[int]]:
    """Per node id, the pids of this job's live actors (a worker Ray started before the job
    asked for it names no job in its environment)."""
    by_node: dict[str, set[int]] = {}
    try:
        for actor in real_ray.job_actors(ray, job_hex).values():
            if actor.pid:
                by_node.setdefault(actor.node_id, set()).add(actor.pid)
    except Exception:  # noqa: BLE001  a cluster going away or another Ray: RAY_JOB_ID alone
        pass
    return by_node


def readings(timeout_s: float = 60.0) -> list[Reading] | None:
    """Per node, (MiB per GPU held by this test's processes, GPU names, their peak RSS where
    the node has no GPU): on this machine its own and its Ray job's, on the cluster's other
    nodes (a zero-CPU task pinned to each) its job's. None where a node's pids cannot be told
    apart (the caller reads whole devices)."""
    read = reader()
    ray = real_ray.connected()
    if ray is None:
        here = read(None, sorted(own_pids()))
        return None if here is None else [here]
    job = real_ray.job_hex(ray)
    actors = _actor_pids(ray, job)
    this_node = real_ray.this_node_id(ray)
    here = read(job, sorted(own_pids() | actors.get(this_node, set())))
    if here is None:
        return None
    others = real_ray.other_node_ids(ray)
    if not others:
        return [here]
    try:
        calls = [real_ray.on_node(ray, read, node).remote(job, sorted(actors.get(node, ()))) for node in others]
        there = ray.get(calls, timeout=timeout_s)
    except Exception:  # noqa: BLE001  a node that cannot answer (any Ray error): whole devices, never a failed test
        return None
    return None if any(r is None for r in there) else [here, *there]
