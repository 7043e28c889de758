"""GPU memory and names, cluster-wide through Ray, with a CPU fallback.

The pure part reads this machine (pynvml from nvidia-ml-py, psutil, /proc); through Ray the
same reading runs on every other alive node, in a zero-CPU task pinned there (real_ray.on_node).
Nothing here raises for lack of a GPU or a driver: no GPU simply means an empty reading.
"""

from __future__ import annotations

import os
import resource
import sys
from dataclasses import dataclass, field
from typing import Any

from testharness import gpu_processes, real_ray
from testharness.contract import gpus_shared

MIB = 1024 * 1024


@dataclass(frozen=True)
class NodeReading:
    """What one node reports: memory used per GPU (MiB), GPU names, peak RSS of Ray workers."""

    gpu_used_mib: list[float] = field(default_factory=list)
    gpu_names: list[str] = field(default_factory=list)
    worker_peak_rss_mib: float = 0.0


def local_gpus() -> tuple[list[float], list[str]]:
    """(memory used per GPU in MiB, GPU names) on this machine; ([], []) without NVML."""
    try:
        import pynvml  # type: ignore[import-untyped,unused-ignore]
    except ImportError:
        return [], []
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:  # LibraryNotFound / DriverNotLoaded: a machine with no GPU
        return [], []
    used: list[float] = []
    names: list[str] = []
    try:
        for i in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(i)
            used.append(pynvml.nvmlDeviceGetMemoryInfo(handle).used / MIB)
            name = pynvml.nvmlDeviceGetName(handle)
            names.append(name.decode() if isinstance(name, bytes) else str(name))
    except pynvml.NVMLError:  # a GPU that stops answering (fallen off the bus): no reading
        return [], []
    finally:
        try:
            pynvml.nvmlShutdown()
        except pynvml.NVMLError:  # already shut down: nothing left to release
            pass
    return used, names


def local_gpu_count() -> int:
    """Number of GPUs NVML sees on this machine (0 without a driver)."""
    return len(local_gpus()[1])


_vmhwm_mib = gpu_processes.peak_rss_reader()


def _peak_rss_mib_of(pid: int) -> float:
    peak = _vmhwm_mib(pid)
    if peak is not None:
        return peak
    try:  # no /proc (macOS): the current RSS
        import psutil

        return float(psutil.Process(pid).memory_info().rss) / MIB
    except psutil.Error:  # the process ended between the listing and the reading
        return 0.0


def self_peak_rss_mib() -> float:
    """Peak RSS of this process in MiB (getrusage reports KiB on Linux, bytes on macOS)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / MIB if sys.platform == "darwin" else peak / 1024.0


def ray_worker_peak_rss_mib() -> float:
    """Largest peak RSS among this machine's Ray worker processes (named `ray::...`)."""
    try:
        import psutil
    except ImportError:
        return 0.0
    best = 0.0
    for proc in psutil.process_iter(["pid", "name", "cmdline"]):
        try:
            cmd = proc.info.get("cmdline") or []
            title = " ".join(cmd) if cmd else (proc.info.get("name") or "")
        except psutil.Error:  # the process ended while the list was read
            continue
        if title.startswith("ray::") or "default_worker.py" in title:
            best = max(best, _peak_rss_mib_of(int(proc.info["pid"])))
    return best


def read_node() -> NodeReading:
    """This machine's reading (what each node's Ray task returns)."""
    used, names = local_gpus()
    return NodeReading(used, names, 0.0 if used else ray_worker_peak_rss_mib())


@dataclass(frozen=True)
class MemoryReading:
    """The cluster-wide maximum (MiB), what it measured ('gpu' or 'rss'), the GPU names seen."""

    mib: float
    source: str
    gpu_names: tuple[str, ...] = ()


def combine(nodes: list[NodeReading], driver_peak_rss_mib: float) -> MemoryReading:
    """Largest GPU memory in use on any GPU of any node; without GPUs, the largest peak RSS
    of the test process and the Ray workers."""
    gpu_used = [u for node in nodes for u in node.gpu_used_mib]
    names = tuple(sorted({n for node in nodes for n in node.gpu_names}))
    if gpu_used:
        return MemoryReading(max(gpu_used), "gpu", names)
    workers = [node.worker_peak_rss_mib for node in nodes]
    return MemoryReading(max([driver_peak_rss_mib, *workers]), "rss", names)


# --- through Ray (real_ray) ------------------------------------------------------------------


def cluster_readings(timeout_s: float = 60.0) -> list[NodeReading]:
    """One reading per alive node of the connected Ray cluster, else this machine's only.
    This process's node is read here; each other node by a zero-CPU task pinned to it. On a
    cluster of one node no task is sent: the first would start a Ray worker process (2 s on a
    CPU box) in every test process, for a reading this one can take itself."""
    here = read_node()
    ray = real_ray.connected()
    if ray is None:
        return [here]
    others = real_ray.other_node_ids(ray)
    if not others:
        return [here]
    task = _node_task()
    refs = [real_ray.on_node(ray, task, node).remote() for node in others]
    try:
        out = ray.get(refs, timeout=timeout_s)
    except Exception:  # noqa: BLE001  a node that cannot answer (any Ray error) must not fail the test
        return [here]
    return [here, *(NodeReading(list(u), list(n), float(w)) for u, n, w in out)]


def _node_task() -> Any:
    """The per-node task body. Built inside a function so cloudpickle ships it by value and
    it imports only pynvml/psutil: Ray workers need not be able to import testharness."""
    peak_rss_mib = gpu_processes.peak_rss_reader()

    def read() -> tuple[list[float], list[str], float]:
        used: list[float] = []
        names: list[str] = []
        try:
            import pynvml  # type: ignore[import-untyped,unused-ignore]
        except ImportError:  # no NVML library on this node: no GPU to read
            pynvml = None
        if pynvml is not None:
            try:
                pynvml.nvmlInit()
                try:
                    for i in range(pynvml.nvmlDeviceGetCount()):
                        h = pynvml.nvmlDeviceGetHandleByIndex(i)
                        used.append(pynvml.nvmlDeviceGetMemoryInfo(h).used / (1024 * 1024))
                        nm = pynvml.nvmlDeviceGetName(h)
                        names.append(nm.decode() if isinstance(nm, bytes) else str(nm))
                finally:
                    pynvml.nvmlShutdown()
            except pynvml.NVMLError:  # no driver on this node, or a GPU that stops answering
                used, names = [], []
        peak = 0.0
        if not used:
            try:
                import psutil

                for p in psutil.process_iter(["pid", "cmdline"]):
                    cmd = " ".join(p.info.get("cmdline") or [])
                    if not (cmd.startswith("ray::") or "default_worker.py" in cmd):
                        continue
                    peak = max(peak, peak_rss_mib(p.info["pid"]) or 0.0)
            except Exception:  # noqa: BLE001  psutil or /proc on a node in any state: a reading, never a failed test
                pass
        return used, names, peak

    return read


def max_memory() -> MemoryReading:
    """The value behind tracker.get_max_mem(), in MiB. Under pytest-xdist, where tests share
    the machine, the memory of this test's own processes (gpu_processes): on its GPUs, or
    without any GPU their peak RSS. Otherwise, as upstream, the largest memory in use on any
    GPU of the cluster, or without GPUs the largest peak RSS of the test and the Ray workers."""
    if gpus_shared():
        nodes = gpu_processes.readings()
        if nodes is not None:  # None: pids not ours to match (a PID namespace): the reading below
            names = tuple(sorted({n for _, node_names, _ in nodes for n in node_names}))
            own = [mib for used, _, _ in nodes for mib in used]
            if own:
                return MemoryReading(max(own), "gpu", names)
            return MemoryReading(max(rss for _, _, rss in nodes), "rss", names)
    return combine(cluster_readings(), self_peak_rss_mib())


def gpu_types() -> list[str]:
    """Distinct GPU names across the cluster (or this machine); [] without GPUs."""
    if real_ray.connected() is None:  # names only: skip read_node's scan of every process for RSS
        return sorted(set(local_gpus()[1]))
    return sorted({name for node in cluster_readings() for name in node.gpu_names})


def cluster_gpu_count() -> int:
    """GPUs available to tests: TESTHARNESS_NUM_GPUS (set by run_unit.sh), the connected Ray
    cluster's GPU total, else this machine's NVML count."""
    env = os.environ.get("TESTHARNESS_NUM_GPUS", "").strip()
    if env.isdigit():
        return int(env)
    ray = real_ray.connected()
    if ray is not None:
        try:
            return real_ray.cluster_gpus(ray)
        except Exception:  # noqa: BLE001  a cluster going away (any Ray error): this machine's count
            pass
    return local_gpu_count()
