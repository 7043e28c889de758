"""Reserve cluster resources for a group of workers with a Ray placement group."""

from __future__ import annotations

import ray
from ray.util.placement_group import PlacementGroup, placement_group, remove_placement_group

from nemo_rl.distributed.ray_cluster import WAIT_TIMEOUT_ENV, ray_wait_timeout_s


class ClusterTooSmall(RuntimeError):
    """The cluster cannot hold the requested workers."""


class RayVirtualCluster:
    """`num_workers` bundles of `gpus_per_worker` GPUs and `cpus_per_worker` CPUs."""

    def __init__(
        self,
        num_workers: int,
        gpus_per_worker: float = 0,
        cpus_per_worker: float = 0.5,
        timeout_s: float | None = None,
    ) -> None:
        if num_workers < 1:
            raise ValueError(f"num_workers must be >= 1, got {num_workers}")
        self.num_workers = num_workers
        self.gpus_per_worker = gpus_per_worker
        self.cpus_per_worker = cpus_per_worker
        bundle: dict[str, float] = {"CPU": cpus_per_worker}
        if gpus_per_worker:
            bundle["GPU"] = gpus_per_worker
        available = ray.cluster_resources()
        for res, amount in bundle.items():
            if available.get(res, 0) < amount * num_workers:
                raise ClusterTooSmall(
                    f"{num_workers} workers need {amount * num_workers:g} {res}, "
                    f"the Ray cluster has {available.get(res, 0):g}"
                )
        self._bundle = bundle
        self._timeout_s = timeout_s
        self.placement_group: PlacementGroup = self._reserve()

    def _reserve(self) -> PlacementGroup:
        # Free resources may be held by another test's group (xdist workers share a cluster).
        timeout = self._timeout_s if self._timeout_s is not None else ray_wait_timeout_s()
        pg: PlacementGroup = placement_group([dict(self._bundle)] * self.num_workers, strategy="PACK")
        try:
            ray.get(pg.ready(), timeout=timeout)
        except ray.exceptions.GetTimeoutError:
            remove_placement_group(pg)
            raise ClusterTooSmall(
                f"could not reserve {self.num_workers} x {self._bundle} within {timeout:g} s "
                f"(free now: {ray.available_resources()}); set {WAIT_TIMEOUT_ENV} to wait longer"
            ) from None
        return pg

    def reserve_again(self) -> None:
        """Give up the reservation and make a new one of the same shape. Removing a placement
        group ends every worker still running on it, also one that outlived `ray.kill`: killed
        while its constructor ran, a worker can keep running and holding its bundle (seen in
        CI with Ray 2.60), and a group started again on the same reservation then waits for it."""
        remove_placement_group(self.placement_group)
        self.placement_group = self._reserve()

    def shutdown(self) -> None:
        remove_placement_group(self.placement_group)


def auto_gpus_per_worker(num_workers: int) -> float:
    """What `gpus_per_worker: auto` means for a group of `num_workers`: one GPU each when the
    Ray cluster has a GPU for every worker, else none (the group runs on the CPU)."""
    return 1.0 if ray.cluster_resources().get("GPU", 0) >= num_workers else 0.0


def cluster_from_config(num_workers: int, gpus_per_worker: str | float) -> RayVirtualCluster:
    """`gpus_per_worker: auto`: see auto_gpus_per_worker."""
    gpus = auto_gpus_per_worker(num_workers) if gpus_per_worker == "auto" else float(gpus_per_worker)
    return RayVirtualCluster(num_workers, gpus_per_worker=gpus, cpus_per_worker=1.0 if gpus else 0.5)
