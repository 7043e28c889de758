import os

import psutil

import pytest
from ray.util import placement_group_table

from nemo_rl.distributed.virtual_cluster import ClusterTooSmall, RayVirtualCluster
from nemo_rl.distributed.worker_group import RayWorkerGroup, init_distributed


class AllReduceWorker:
    def __init__(self) -> None:
        init_distributed()

    def all_reduce(self, value: float) -> tuple[int, int, float, str]:
        import torch
        import torch.distributed as dist

        t = torch.tensor([value], device="cuda" if torch.cuda.is_available() else "cpu")
        dist.all_reduce(t)
        return dist.get_rank(), dist.get_world_size(), float(t.item()), dist.get_backend()

    def pid(self) -> int:
        return os.getpid()


def test_two_workers_all_reduce(ray_cluster) -> None:
    group = RayWorkerGroup(RayVirtualCluster(2, cpus_per_worker=0.5), AllReduceWorker)
    try:
        results = group.run_sharded("all_reduce", [(1.0,), (2.0,)])
        assert [r[0] for r in results] == [0, 1]
        assert all(r[1] == 2 and r[2] == 3.0 for r in results)
        assert {r[3] for r in results} == {"gloo"}
        assert len(set(group.run_all("pid"))) == 2  # one process each
    finally:
        group.shutdown()


def test_too_large_a_group_is_a_clear_error(ray_cluster) -> None:
    with pytest.raises(ClusterTooSmall, match="workers need"):
        RayVirtualCluster(10_000, cpus_per_worker=1.0)


def test_shutdown_ends_the_workers_and_frees_their_reservation(ray_cluster) -> None:
    cluster = RayVirtualCluster(1, cpus_per_worker=0.5)
    group = RayWorkerGroup(cluster, AllReduceWorker)
    (pid,) = group.run_all("pid")
    group.shutdown()
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    assert placement_group_table(cluster.placement_group)["state"] == "REMOVED"
