"""GPU memory and utilisation of every GPU of every Ray node, via NVML (pynvml)."""

from __future__ import annotations

import time
from typing import Any

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy


def local_gpu_stats() -> list[dict[str, Any]]:
    """One dict per local GPU (index, name, memory_used_mib, utilization_pct); [] without NVML."""
    try:
        import pynvml
    except ImportError:  # no NVML library on this node
        return []
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:  # no NVIDIA driver on this node
        return []
    try:
        stats = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            name = pynvml.nvmlDeviceGetName(h)
            stats.append(
                {
                    "index": i,
                    "name": name.decode() if isinstance(name, bytes) else str(name),
                    "memory_used_mib": pynvml.nvmlDeviceGetMemoryInfo(h).used / 2**20,
                    "utilization_pct": float(pynvml.nvmlDeviceGetUtilizationRates(h).gpu),
                }
            )
        return stats
    finally:
        pynvml.nvmlShutdown()


_remote_stats = ray.remote(num_cpus=0)(local_gpu_stats)


def cluster_gpu_stats() -> dict[str, list[dict[str, Any]]]:
    """{node_id: stats} for every alive node (this process only when Ray is not running).

    This process's own node is read here: NVML sees every GPU of the machine from any process,
    and a task would cost a Ray worker process (its start, 2 s on a CPU box) on a cluster of
    one node, the usual case. Each other node is read by a task placed on it."""
    if not ray.is_initialized():
        return {"local": local_gpu_stats()}
    here = ray.get_runtime_context().get_node_id()
    others = [n["NodeID"] for n in ray.nodes() if n.get("Alive") and n["NodeID"] != here]
    refs = [
        _remote_stats.options(scheduling_strategy=NodeAffinitySchedulingStrategy(n, soft=False)).remote()
        for n in others
    ]
    stats = {here: local_gpu_stats()}
    stats.update(zip(others, ray.get(refs, timeout=60), strict=True))
    return stats


class GpuMonitor:
    """Collects `gpu/...` metrics at most every `interval_s`; says once when there is no GPU."""

    def __init__(self, interval_s: float = 10.0) -> None:
        self.interval_s = interval_s
        self._last = -float("inf")
        self._warned = False

    def collect(self, force: bool = False) -> dict[str, float]:
        now = time.monotonic()
        if not force and now - self._last < self.interval_s:
            return {}
        self._last = now
        metrics: dict[str, float] = {}
        for node_idx, (_, gpus) in enumerate(sorted(cluster_gpu_stats().items())):
            for g in gpus:
                prefix = f"gpu/node{node_idx}_gpu{g['index']}"
                metrics[f"{prefix}/memory_used_mib"] = g["memory_used_mib"]
                metrics[f"{prefix}/utilization_pct"] = g["utilization_pct"]
        if not metrics and not self._warned:
            print("[gpu-monitor] no NVIDIA GPU found on any node; GPU metrics are off for this run", flush=True)
            self._warned = True
        return metrics
