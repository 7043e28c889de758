"""The tracker's cluster-wide reading (testharness.gpu.cluster_readings) on a real Ray cluster of
one node: the node is read in the test process, with no Ray task (the first task of a test
process starts a Ray worker process for it, 2 s on a CPU box, paid once per process at the
recorder's reading of the GPU names)."""

from __future__ import annotations

from typing import Any

import pytest

from testharness import gpu, real_ray


def test_a_cluster_of_one_node_is_read_here_without_a_task(ray_cluster: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    ray = ray_cluster
    if real_ray.alive_node_ids(ray) != [real_ray.this_node_id(ray)]:
        pytest.skip("the cluster has other nodes: they are read by tasks")

    def no_task(*_: Any, **__: Any) -> Any:
        raise AssertionError("a Ray task was sent to read a node")

    monkeypatch.setattr(real_ray, "on_node", no_task)
    [reading] = gpu.cluster_readings()
    used, names = gpu.local_gpus()
    assert reading.gpu_names == names and len(reading.gpu_used_mib) == len(used)
    if not used:  # without GPUs: the peak RSS of this machine's Ray workers, as a task reads it
        assert reading.worker_peak_rss_mib >= 0.0
    assert gpu.gpu_types() == sorted(set(names))
