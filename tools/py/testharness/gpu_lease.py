"""The GPU lease of a `uses_cuda` test under `-n`: CUDA that Ray does not see, counted in the
shared cluster while the test runs (testharness.parallel's worker takes it around the test).

A placeholder actor pinned to this node asks for what the test uses (lease_gpus) and holds it
until the test has finished or its process is gone.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from testharness import real_ray

LEASE_TIMEOUT_ENV = "TESTHARNESS_GPU_LEASE_TIMEOUT_S"
CUDA_SHARE = 0.25  # of a one-GPU node, for a uses_cuda test: at most four GPU tests at once there


def lease_timeout_s(env: dict[str, str]) -> float:
    raw = env.get(LEASE_TIMEOUT_ENV, "").strip()
    try:
        value = float(raw) if raw else 600.0
    except ValueError:
        value = -1.0
    if not value > 0:
        raise pytest.UsageError(f"{LEASE_TIMEOUT_ENV}={raw!r}: expected a number of seconds greater than 0")
    return value


def lease_gpus(node_gpus: float) -> float:
    """What a `uses_cuda` test holds of its node's `node_gpus`: a share of a one-GPU node, as
    the tests' fractional actors do (its memory readings count its own processes only:
    gpu_processes), so it never waits for the whole GPU; every GPU of a larger node, as CUDA in
    the test process cannot be steered to the one GPU Ray would pick."""
    return CUDA_SHARE if node_gpus == 1 else node_gpus


def hold_node_gpus(timeout_s: float, release_file: Path) -> bool:
    """Ask the shared cluster for this node's GPUs (lease_gpus) with a placeholder actor and
    wait until it holds them (False: this node has no GPU). TimeoutError (one line) if they did not
    come free in time. The lease ends when `release_file` exists or this process is gone.

    The test process is left as it was found: the lease is a detached actor that ends itself,
    so a process that was not connected to Ray is disconnected again (the test's own
    `ray.init()` is not refused as a second one) and releasing needs no Ray connection (the
    test may have connected to a cluster of its own)."""
    ray, _ = real_ray.load()
    if ray is None:
        return False  # Ray blocked or replaced by a stand-in in this process: nothing to lease with
    with real_ray.joined(ray):
        node_id = real_ray.this_node_id(ray)
        gpus = real_ray.node_gpus(ray, node_id)
        if not gpus:
            return False
        lease: Any = real_ray.on_node(
            ray, _placeholder(), node_id, num_gpus=lease_gpus(gpus), lifetime="detached"
        ).remote(str(release_file), os.getpid())
        try:
            ray.get(lease.held.remote(), timeout=timeout_s)
        except ray.exceptions.GetTimeoutError:
            ray.kill(lease)
            raise TimeoutError(
                f"{lease_gpus(gpus):g} of the {gpus:g} GPU(s) of this node did not come free within {timeout_s:g} s; "
                f"set {LEASE_TIMEOUT_ENV} to wait longer"
            ) from None
    return True


def _placeholder() -> type:
    """Built in a function so cloudpickle ships it by value: Ray workers need not import
    testharness."""

    class GpuLease:
        def __init__(self, release_file: str, owner_pid: int) -> None:
            import os
            import threading
            import time

            def owner_alive() -> bool:
                try:
                    os.kill(owner_pid, 0)  # same node (node affinity), so the pid is ours to probe
                    return True
                except ProcessLookupError:
                    return False
                except PermissionError:
                    return True

            def hold() -> None:
                while not os.path.exists(release_file) and owner_alive():
                    time.sleep(0.1)
                os._exit(0)  # the actor ends; Ray frees the GPUs (a detached actor is not restarted)

            threading.Thread(target=hold, daemon=True).start()

        def held(self) -> bool:
            return True

    return GpuLease
