"""What the -n controller hands its workers (testharness.parallel): the key of its part of
xdist's `workerinput`, the file in the run's shared folder where the cluster's address comes,
and how a conftest finds the worker's side."""

from __future__ import annotations

from typing import Any

import pytest

WORKERINPUT_KEY = "testharness_parallel"
CLUSTER_FILE = "ray_cluster.json"  # in the run's shared folder: {"address", "gpus", "env"} or {"error"}
WORKER_PLUGIN = "testharness-parallel-worker"  # the worker's plugin (worker.py registers it)


def shared_ray_address(config: pytest.Config) -> str | None:
    """In an xdist worker of a `-n` run whose workers share a Ray cluster: its address, once
    the controller has it (this waits; RAY_ADDRESS is exported). None elsewhere, or when the
    start failed (the controller ends the run). The harness calls it before the worker's first
    test; a conftest that joins earlier (in pytest_sessionstart) calls it first."""
    worker: Any = config.pluginmanager.get_plugin(WORKER_PLUGIN)
    return worker.await_cluster() if worker is not None else None
