"""Connections and the cluster (testharness.real_ray): joining, stopping what this process
started, the cluster's GPUs and nodes, a task pinned to a node."""

from __future__ import annotations

import contextlib
import os
import socket
import sys
from collections.abc import Iterator
from types import ModuleType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    pass
from testharness.real_ray.find import load

# --- connections -------------------------------------------------------------------------


def reachable(address: str, timeout_s: float = 1.0) -> bool:
    """Whether something answers at `host:port` (a head's GCS port), within `timeout_s`."""
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        return False
    try:
        with socket.create_connection((host, int(port)), timeout=timeout_s):
            return True
    except OSError:
        return False


def local_head_address() -> str | None:
    """The address a `ray start --head` on this machine recorded, if that head answers.

    Only `ray start` writes this record, so a Ray instance that another pytest session started
    in-process (and will stop) is never joined; a killed head's stale record is not trusted.
    Imports Ray (run_unit's discovery, before any test); None without Ray or where it differs."""
    try:
        from ray._private.services import find_bootstrap_address

        address = find_bootstrap_address(None)
    except Exception:  # noqa: BLE001  not installed, or Ray's private API differs between releases: no head found
        return None
    return address if address and reachable(address) else None


@contextlib.contextmanager
def joined(ray: ModuleType, address: str | None = None, **init_kwargs: Any) -> Iterator[ModuleType]:
    """Connected to a cluster for the block: the one this process is connected to, else the
    one at `address` (default $RAY_ADDRESS, else "auto": this machine's head), joined for the
    block and left after it. Errors of `ray.init` are the caller's."""
    if ray.is_initialized():
        yield ray
        return
    ray.init(address=address or os.environ.get("RAY_ADDRESS") or "auto", log_to_driver=False, **init_kwargs)
    try:
        yield ray
    finally:
        ray.shutdown()


# --- the cluster ---------------------------------------------------------------------------


def stop_cluster(ray: ModuleType) -> None:
    """`ray.shutdown()` of a cluster this process started, less the second it spends on the
    autoscaler's monitor: Ray stops its processes one by one, each given a second to exit on
    SIGTERM, and the monitor (idle on a one-node local cluster) takes all of it, its handler
    reporting to a GCS already stopped. The monitor is ended first (SIGKILL: it holds no
    state); the rest stop as Ray stops them. Where this Ray differs, a plain `ray.shutdown()`."""
    try:
        node = ray._private.worker._global_node
        monitors = list(node.all_processes.get("monitor", [])) if node is not None else []
    except Exception:  # noqa: BLE001  Ray's private API differs between releases
        monitors = []
    for info in monitors:
        try:
            info.process.kill()
            info.process.wait(timeout=5)
        except Exception:  # noqa: BLE001  gone already, or not ours to wait on: Ray's shutdown handles it
            pass
    ray.shutdown()


def reread_settings() -> None:
    """Have an imported Ray read its RAY_* settings again (Ray's own `Config.initialize("")`,
    what it does after setting RAY_AUTH_MODE in the process that starts a cluster): a process
    that imported Ray before the variables were set. Nothing where Ray is not imported or
    differs."""
    settings = getattr(sys.modules.get("ray._raylet"), "Config", None)  # private
    if settings is not None:
        settings.initialize("")


def cluster_gpus(ray: ModuleType) -> int:
    """GPUs of the cluster this process is connected to (the total of its resources)."""
    return int(ray.cluster_resources().get("GPU", 0))


def gpus_of_cluster_at(address: str) -> int:
    """Join the cluster at `address`, count its GPUs, leave it. Raises what joining raised
    (RuntimeError, one line, when there is no real Ray to join with)."""
    import logging

    ray, why_not = load()
    if ray is None:
        raise RuntimeError(why_not)
    with joined(ray, address, logging_level=logging.ERROR):
        return cluster_gpus(ray)


def job_hex(ray: ModuleType) -> str:
    """The id (hex) of this driver's Ray job: each xdist worker is a driver, so a job, of its own."""
    return str(ray.get_runtime_context().get_job_id())


def this_node_id(ray: ModuleType) -> str:
    """The id (hex) of the node this process runs on."""
    return str(ray.get_runtime_context().get_node_id())


def alive_node_ids(ray: ModuleType) -> list[str]:
    """The ids (hex) of the cluster's alive nodes."""
    return [str(node["NodeID"]) for node in ray.nodes() if node.get("Alive")]


def other_node_ids(ray: ModuleType) -> list[str]:
    """The alive nodes other than this process's: the ones a reading must ask through a task
    (this process reads its own machine itself)."""
    here = this_node_id(ray)
    return [node for node in alive_node_ids(ray) if node != here]


def node_gpus(ray: ModuleType, node_id: str) -> float:
    """The GPUs node `node_id` has (0 when it has none or is not in the cluster)."""
    return float(next((n["Resources"].get("GPU", 0) for n in ray.nodes() if n["NodeID"] == node_id), 0))


def on_node(ray: ModuleType, target: Any, node_id: str, **options: Any) -> Any:
    """`target` (a function or a class) as a zero-CPU Ray task or actor pinned to node
    `node_id` (hard affinity: it runs there or fails), with Ray's `options` (num_gpus,
    lifetime, ...): call `.remote(...)` on what comes back. A zero-CPU task never waits for
    the CPUs the tests' own actors hold. Build `target` inside a function, so cloudpickle
    ships it by value and the Ray workers need not import the harness."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    pinned = NodeAffinitySchedulingStrategy(node_id, soft=False)
    return ray.remote(num_cpus=0)(target).options(scheduling_strategy=pinned, **options)
