"""Start or join a Ray cluster.

`init_ray()` joins an existing cluster when RAY_ADDRESS is set or a `ray start` head is
running on this machine; otherwise it starts a local one sized to the machine.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass

import ray


@dataclass(frozen=True)
class ClusterInfo:
    address: str
    started_here: bool  # this call started a new local cluster
    num_cpus: float
    num_gpus: float


def _reachable(address: str, timeout_s: float = 1.0) -> bool:
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=timeout_s):
            return True
    except (OSError, ValueError):
        return False


def local_head_address() -> str | None:
    """Address of a live `ray start` head on this machine, ignoring stale records.

    A killed head leaves `ray_current_cluster` behind; trusting it makes ray.init fail.
    """
    from ray._private.services import find_bootstrap_address

    address = find_bootstrap_address(None)
    return address if address and _reachable(address) else None


def count_local_gpus() -> int:
    """GPUs on this machine, via NVML (no CUDA context is created)."""
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            return int(pynvml.nvmlDeviceGetCount())
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # no driver / no library: a CPU machine
        return 0


def init_ray(num_cpus: int | None = None, num_gpus: int | None = None) -> ClusterInfo:
    """Connect to (or start) Ray once per process; later calls return the same cluster."""
    started_here = False
    if not ray.is_initialized():
        address = os.environ.get("RAY_ADDRESS") or local_head_address()
        if address:
            ray.init(address=address, log_to_driver=True)
        else:
            ray.init(
                address="local",
                num_cpus=num_cpus if num_cpus is not None else os.cpu_count() or 1,
                num_gpus=num_gpus if num_gpus is not None else count_local_gpus(),
                include_dashboard=False,
                _node_ip_address="127.0.0.1",
            )
            started_here = True
    resources = ray.cluster_resources()
    return ClusterInfo(
        address=ray.get_runtime_context().gcs_address,
        started_here=started_here,
        num_cpus=float(resources.get("CPU", 0)),
        num_gpus=float(resources.get("GPU", 0)),
    )
