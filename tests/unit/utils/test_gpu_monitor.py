"""The logger's GPU monitor on the session's Ray cluster (one node): that node is read in this
process, with no Ray task (a task would start a worker process, 2 s on a CPU box, at the first
logged step of every run)."""

from typing import Any

import pytest
import ray

from nemo_rl.utils import gpu_monitor


class _NoTask:
    def options(self, **_: Any) -> Any:
        raise AssertionError("a Ray task was sent to read a node")


def test_this_node_is_read_here_without_a_ray_task(ray_cluster, monkeypatch: pytest.MonkeyPatch) -> None:
    here = ray.get_runtime_context().get_node_id()
    if [n["NodeID"] for n in ray.nodes() if n["Alive"]] != [here]:
        pytest.skip("the cluster has other nodes: they are read by tasks")
    monkeypatch.setattr(gpu_monitor, "_remote_stats", _NoTask())
    stats = gpu_monitor.cluster_gpu_stats()
    assert list(stats) == [here]
    assert [(g["index"], g["name"]) for g in stats[here]] == [
        (g["index"], g["name"]) for g in gpu_monitor.local_gpu_stats()
    ]
    # The metric names are node0's, as from a task
    assert all(k.startswith("gpu/node0_gpu") for k in gpu_monitor.GpuMonitor(interval_s=0).collect(force=True))
