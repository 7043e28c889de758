import os
import socket
import time
from pathlib import Path

import psutil
import pytest
import ray
from ray.util import placement_group_table
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from nemo_rl.distributed.ray_cluster import WAIT_TIMEOUT_ENV, RayWaitTimeout, ray_wait_timeout_s
from nemo_rl.distributed.virtual_cluster import ClusterTooSmall, RayVirtualCluster
from nemo_rl.distributed.worker_group import (
    RENDEZVOUS_MIN_PORT,
    RayWorkerGroup,
    free_port,
    init_distributed,
    rendezvous_ports,
)


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


class SlowWorker:
    def __init__(self, seconds: float) -> None:
        time.sleep(seconds)


def _processes_titled(fragment: str) -> list[psutil.Process]:
    """Ray names an actor's process `ray::<Class>...`."""
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        if any(fragment in part for part in proc.info["cmdline"] or []):
            found.append(proc)
    return found


class BrokenWorker:
    def __init__(self) -> None:
        raise ValueError("no such model: /nonexistent")


def test_a_late_worker_is_named_and_does_not_outlive_its_group(ray_cluster, monkeypatch) -> None:
    monkeypatch.setenv(WAIT_TIMEOUT_ENV, "3")
    cluster = RayVirtualCluster(1, cpus_per_worker=0.5)
    try:
        with pytest.raises(
            RayWaitTimeout, match=r"SlowWorker rank 0 of 1 did not become ready within 3 s.*NRL_RAY_WAIT_TIMEOUT_S"
        ):
            RayWorkerGroup(cluster, SlowWorker, seconds=600)
    finally:
        cluster.shutdown()
    assert _running_after("ray::SlowWorker", timeout_s=30) == []


def _running_after(fragment: str, timeout_s: float) -> list[psutil.Process]:
    """The processes titled `fragment` still running (not zombies) once all have ended or
    `timeout_s` has passed. Not psutil.wait_procs: a zombie that is not our child counts as
    alive there until the timeout, and a killed actor's process can stay one for a while."""
    deadline = time.monotonic() + timeout_s
    while True:
        running = []
        for proc in _processes_titled(fragment):
            try:
                if proc.status() != psutil.STATUS_ZOMBIE:
                    running.append(proc)
            except psutil.NoSuchProcess:
                continue
        if not running or time.monotonic() >= deadline:
            return running
        time.sleep(0.1)


def test_a_constructor_error_is_raised_at_once_not_after_the_wait(ray_cluster) -> None:
    cluster = RayVirtualCluster(1, cpus_per_worker=0.5)
    began = time.monotonic()
    try:
        with pytest.raises(ray.exceptions.RayActorError, match="no such model: /nonexistent"):
            RayWorkerGroup(cluster, BrokenWorker)
    finally:
        cluster.shutdown()
    assert time.monotonic() - began < ray_wait_timeout_s() / 2


def test_rank_0_port_is_chosen_between_rays_ports_and_the_ephemeral_range() -> None:
    assert rendezvous_ports((32768, 60999)) == range(RENDEZVOUS_MIN_PORT, 32768)
    assert rendezvous_ports(None) == range(RENDEZVOUS_MIN_PORT, 32768)  # unknown: Linux's default
    assert rendezvous_ports((1024, 65535)) is None  # no room: the kernel chooses
    with socket.socket() as held:  # a taken port is not chosen; with none left, the kernel's
        held.bind(("", free_port(rendezvous_ports((32768, 60999)))))
        taken = held.getsockname()[1]
        assert RENDEZVOUS_MIN_PORT <= taken < 32768
        assert free_port(range(taken, taken + 1)) != taken


class PortRaceWorker:
    """The group's first start loses the race for rank 0's port, as torch.distributed reports it."""

    def __init__(self, flag: str) -> None:
        if not os.path.exists(flag):
            open(flag, "w").close()
            raise RuntimeError(
                "DistNetworkError: The server socket has failed to listen on any local network "
                "address. port: 29500, useIpv6: false, code: -98, name: EADDRINUSE, message: address already in use"
            )
        init_distributed()

    def port(self) -> int:
        return int(os.environ["MASTER_PORT"])


def test_a_port_taken_before_rank_0_listens_starts_the_group_again(ray_cluster, tmp_path: Path) -> None:
    cluster = RayVirtualCluster(2, cpus_per_worker=0.5)
    first = cluster.placement_group
    group = None
    try:
        group = RayWorkerGroup(cluster, PortRaceWorker, str(tmp_path / "lost_once"))
        ports = group.run_all("port")
        assert len(set(ports)) == 1 and RENDEZVOUS_MIN_PORT <= ports[0] < 32768
        # Started again on a new reservation: nothing the failed start left can hold a bundle.
        assert placement_group_table(first)["state"] == "REMOVED"
    finally:
        (group or cluster).shutdown()  # a start that failed leaves the reservation to us


class LeftBehindWorker:
    def __init__(self) -> None:
        time.sleep(600)


def test_reserving_again_ends_what_still_runs_on_the_old_reservation(ray_cluster) -> None:
    """What a failed start can leave: a worker still in its constructor after `ray.kill` (Ray
    can miss one killed while its constructor runs; CI saw a group wait 10 minutes for its
    bundle). Reserving again ends it, and the new reservation is there for the next start."""
    cluster = RayVirtualCluster(1, cpus_per_worker=0.5)
    try:
        old = cluster.placement_group
        strategy = PlacementGroupSchedulingStrategy(old, placement_group_bundle_index=0)
        left = ray.remote(LeftBehindWorker).options(num_cpus=0.5, scheduling_strategy=strategy).remote()  # noqa: F841  a handle kept: Ray ends an actor nobody holds
        deadline = time.monotonic() + 120
        while not _processes_titled("ray::LeftBehindWorker") and time.monotonic() < deadline:
            time.sleep(0.2)
        assert _processes_titled("ray::LeftBehindWorker"), "the worker never started"
        cluster.reserve_again()
        assert placement_group_table(old)["state"] == "REMOVED"
        assert placement_group_table(cluster.placement_group)["state"] == "CREATED"
        assert _running_after("ray::LeftBehindWorker", timeout_s=30) == []
    finally:
        cluster.shutdown()


@pytest.mark.parametrize("raw", ["soon", "0", "-5", "nan", "inf"])
def test_a_bad_wait_timeout_names_the_variable(monkeypatch, raw) -> None:
    monkeypatch.setenv(WAIT_TIMEOUT_ENV, raw)
    with pytest.raises(ValueError, match=rf"NRL_RAY_WAIT_TIMEOUT_S='{raw}': expected a number of seconds"):
        ray_wait_timeout_s()


def test_wait_timeouts_default_and_read_the_environment(monkeypatch) -> None:
    monkeypatch.delenv(WAIT_TIMEOUT_ENV, raising=False)
    assert ray_wait_timeout_s() == 600
    monkeypatch.setenv(WAIT_TIMEOUT_ENV, " 42.5 ")
    assert ray_wait_timeout_s() == 42.5
