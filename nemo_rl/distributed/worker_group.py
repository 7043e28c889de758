"""Start N `@ray.remote` workers that share a torch.distributed group, and call them together.

Workers are given RANK / WORLD_SIZE / MASTER_ADDR / MASTER_PORT in their environment and
call `init_distributed()` (below) from their constructor: gloo on CPU, nccl on GPU. Where the
job's own runtime environment has what the caller asked for, every worker runs in it (so that
an idle worker the job's set-up prepared can take it, e.g. the test suite's warm workers): a rank of a larger group gets its variables from
its constructor's wrapper (`_setting_env`) before the class's own code runs, and a group of
one needs none (`init_distributed()` makes it rank 0 of 1 on a free port). Elsewhere each
worker gets a runtime environment with them all.
"""

from __future__ import annotations

import importlib
import os
import random
import re
import socket
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import psutil
import ray
from ray.util import placement_group_table
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from nemo_rl.distributed.ray_cluster import WAIT_TIMEOUT_ENV, RayWaitTimeout, forwarded_env, ray_wait_timeout_s
from nemo_rl.distributed.virtual_cluster import RayVirtualCluster


def _job_env_has(env: dict[str, str]) -> bool:
    """Whether this job's runtime environment already gives every worker `env` (init_ray
    puts FORWARDED_ENV there)."""
    job_vars = (ray.get_runtime_context().runtime_env or {}).get("env_vars") or {}
    return all(job_vars.get(k) == v for k, v in env.items())


RANK_ENV_KEYWORD = "_nrl_rank_env"


def _setting_env(cls: type) -> type:
    """`cls` whose constructor first puts its rank's variables (the keyword RANK_ENV_KEYWORD)
    in os.environ, then runs `cls`'s own. The ranks of a group then share the job's runtime
    environment, which a warm worker has: a runtime environment of each rank's own would start
    every rank in a new process. The names are `cls`'s, so that Ray and logs show the class."""

    class Ranked(cls):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            os.environ.update(kwargs.pop(RANK_ENV_KEYWORD))
            super().__init__(*args, **kwargs)

    Ranked.__name__, Ranked.__qualname__, Ranked.__module__ = cls.__name__, cls.__qualname__, cls.__module__
    Ranked.__doc__ = cls.__doc__
    return Ranked


def resolve_class(spec: str | type) -> type:
    """`"package.module.ClassName"` or a class -> the class."""
    if isinstance(spec, type):
        return spec
    module_name, _, class_name = spec.rpartition(".")
    return getattr(importlib.import_module(module_name), class_name)  # type: ignore[no-any-return]


# Rank 0 listens on MASTER_PORT seconds after the port is chosen (its process must start
# first). A port of the kernel's ephemeral range may become another socket's meanwhile: any
# outgoing connection or bind to port 0 gets one, and Ray makes many. So the port is chosen
# above Ray's worker ports (10002-19999 by default) and below that range; a choice that still
# loses the race (rank 0 fails with EADDRINUSE) starts the group again on another port.
RENDEZVOUS_MIN_PORT = 20000
PORT_ATTEMPTS = 3
_PORT_TAKEN = re.compile(r"EADDRINUSE|address already in use", re.IGNORECASE)


def rendezvous_ports(ephemeral: tuple[int, int] | None) -> range | None:
    """Ports to choose MASTER_PORT from, given the kernel's ephemeral range (None: unknown,
    Linux's default assumed); None when no port lies between Ray's and that range."""
    low = ephemeral[0] if ephemeral else 32768
    return range(RENDEZVOUS_MIN_PORT, low) if low > RENDEZVOUS_MIN_PORT else None


def _ephemeral_range() -> tuple[int, int] | None:
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return None


def free_port(ports: range | None, tries: int = 64) -> int:
    """A port of `ports` that nothing on this host is bound to now (the kernel's choice when
    `ports` is None or all those tried are taken)."""
    candidates = random.sample(ports, min(tries, len(ports))) if ports else []
    for port in [*candidates, 0]:
        with socket.socket() as s:
            try:
                s.bind(("", port))
            except OSError:
                continue
            return int(s.getsockname()[1])
    raise OSError("no free port")  # unreachable: port 0 always binds


@ray.remote(num_cpus=0)
def _rendezvous_address() -> tuple[str, int]:
    """A free port on the node that will host rank 0 (see RENDEZVOUS_MIN_PORT)."""
    return ray.util.get_node_ip_address(), free_port(rendezvous_ports(_ephemeral_range()))


def _where(_actor: object) -> tuple[str, int]:
    return ray.get_runtime_context().get_node_id(), os.getpid()


def wait_until_ready(actors: Sequence[Any], names: Sequence[str], timeout_s: float | None = None) -> None:
    """Wait until every actor's constructor has returned (NRL_RAY_WAIT_TIMEOUT_S, default
    600 s); a constructor that raised raises here, one that is late raises RayWaitTimeout
    naming the actor."""
    timeout = timeout_s if timeout_s is not None else ray_wait_timeout_s()
    refs = {a.__ray_ready__.remote(): name for a, name in zip(actors, names, strict=True)}
    late = list(refs)
    deadline = time.monotonic() + timeout
    while late and (left := deadline - time.monotonic()) > 0:
        ready, late = ray.wait(late, num_returns=1, timeout=left)
        ray.get(ready)  # a constructor that raised: its error now, not after the others' timeout
    if late:
        raise RayWaitTimeout(
            f"actor {', '.join(refs[r] for r in late)} did not become ready within {timeout:g} s "
            f"(its constructor is still running, or Ray could not start or place it; free now: "
            f"{_free_resources()}); set {WAIT_TIMEOUT_ENV} to wait longer"
        )


def _free_resources() -> dict[str, float]:
    return {k: v for k, v in ray.available_resources().items() if k in ("CPU", "GPU", "memory")}


# An idle actor answers a trivial call within this on a loaded machine; one that does not is
# in the middle of a call (a hung collective, a test that failed) and is killed instead.
_ANSWER_TIMEOUT_S = 60.0


def terminate_actors(actors: Sequence[Any], timeout_s: float | None = None) -> None:
    """End actors gracefully so their atexit handlers (coverage data) run, allowing them
    `timeout_s` (default NRL_RAY_WAIT_TIMEOUT_S) to exit; kill the ones that are busy in a
    call or do not exit in time."""
    if not actors:
        return
    timeout = timeout_s if timeout_s is not None else ray_wait_timeout_s()
    asked = {a.__ray_call__.remote(_where): a for a in actors}
    answered, busy = ray.wait(list(asked), num_returns=len(asked), timeout=min(timeout, _ANSWER_TIMEOUT_S))
    for ref in busy:
        ray.kill(asked[ref], no_restart=True)
    places, idle = [], []
    for ref in answered:
        try:
            places.append(ray.get(ref))
            idle.append(asked[ref])
        except ray.exceptions.RayError:  # dead already: nothing to end
            pass
    refs = {a.__ray_terminate__.remote(): a for a in idle}
    _, stuck = ray.wait(list(refs), num_returns=len(refs), timeout=timeout)
    for ref in stuck:
        ray.kill(refs[ref], no_restart=True)
    # The terminate call returns before the process has finished exiting: wait for the
    # ones on this node, so what they write at exit is complete before Ray stops.
    here = ray.get_runtime_context().get_node_id()
    procs = []
    for node, pid in places:
        if node == here:
            try:
                procs.append(psutil.Process(pid))
            except psutil.NoSuchProcess:
                pass
    psutil.wait_procs(procs, timeout=timeout)


def init_distributed() -> None:
    """Join the process group described by the environment the worker group set."""
    import torch
    import torch.distributed as dist

    if dist.is_initialized():
        return
    if "WORLD_SIZE" not in os.environ:  # a group of one, in the job's environment (RayWorkerGroup)
        os.environ.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0")
    if "MASTER_PORT" not in os.environ and os.environ.get("WORLD_SIZE") == "1":  # a group of one
        os.environ["MASTER_ADDR"] = "127.0.0.1"
        os.environ["MASTER_PORT"] = str(free_port(rendezvous_ports(_ephemeral_range())))
    # A CPU worker on a GPU machine still sees CUDA; what counts is whether Ray gave it a GPU.
    if ray.get_gpu_ids() and torch.cuda.is_available():
        torch.cuda.set_device(0)  # Ray sets CUDA_VISIBLE_DEVICES to this worker's GPU
        dist.init_process_group("nccl", device_id=torch.device("cuda", 0))
    else:
        dist.init_process_group("gloo")


class RayWorkerGroup:
    """One actor per bundle of `cluster`; `run_all` calls a method on every worker."""

    def __init__(
        self,
        cluster: RayVirtualCluster,
        actor_class: str | type,
        *args: Any,
        env_vars: dict[str, str] | None = None,
        **kwargs: Any,
    ) -> None:
        self.cluster = cluster
        cls = resolve_class(actor_class)
        self.workers: list[Any] = []
        for attempt in range(1, PORT_ATTEMPTS + 1):
            try:
                self._start(cls, args, kwargs, env_vars)
                return
            except Exception as exc:
                if attempt == PORT_ATTEMPTS or not _PORT_TAKEN.search(str(exc)):
                    raise
            cluster.reserve_again()  # nothing of the failed start may hold a bundle of the next

    def _start(self, cls: type, args: tuple[Any, ...], kwargs: dict[str, Any], env_vars: dict[str, str] | None) -> None:
        """Choose rank 0's port, start one actor per bundle, wait until all are ready."""
        pg = self.cluster.placement_group
        timeout = ray_wait_timeout_s()
        world = self.cluster.num_workers
        asked_env = {**forwarded_env(), **(env_vars or {})}
        in_job_env = _job_env_has(asked_env)  # else each worker gets a runtime environment
        group_env = dict(WORLD_SIZE=str(world), LOCAL_RANK="0")
        if world > 1:  # the others must know rank 0's address before they start; a group of
            # one picks its own port in init_distributed (no task, so no extra worker process)
            master_addr, master_port = self._rendezvous(pg, timeout)
            group_env.update(MASTER_ADDR=master_addr, MASTER_PORT=str(master_port))
        ranked = in_job_env and world > 1
        remote_cls: Any = ray.remote(_setting_env(cls) if ranked else cls)
        self.workers = []
        for rank in range(world):
            rank_env = dict(group_env, RANK=str(rank))
            options: dict[str, Any] = {}
            rank_kwargs = kwargs
            if not in_job_env:
                options["runtime_env"] = {"env_vars": {**asked_env, **rank_env}}
            elif ranked:
                rank_kwargs = {**kwargs, RANK_ENV_KEYWORD: rank_env}
            # else: a group of one in the job's environment; init_distributed makes it rank 0 of 1
            self.workers.append(
                remote_cls.options(
                    num_cpus=self.cluster.cpus_per_worker,
                    num_gpus=self.cluster.gpus_per_worker,
                    scheduling_strategy=PlacementGroupSchedulingStrategy(pg, placement_group_bundle_index=rank),
                    **options,
                ).remote(*args, **rank_kwargs)
            )
        try:
            wait_until_ready(self.workers, [f"{cls.__name__} rank {r} of {world}" for r in range(world)], timeout)
        except BaseException:
            for worker in self.workers:  # nothing may outlive a group that never started
                ray.kill(worker, no_restart=True)
            self.workers = []
            raise

    @staticmethod
    def _rendezvous(pg: Any, timeout: float) -> tuple[str, int]:
        """Rank 0's address: a free port on the node of bundle 0, picked here where that is this
        process's node, else by a task there (a worker process of its own: it could take a
        warm worker an actor of the group was to have)."""
        if placement_group_table(pg).get("bundles_to_node_id", {}).get(0) == ray.get_runtime_context().get_node_id():
            return ray.util.get_node_ip_address(), free_port(rendezvous_ports(_ephemeral_range()))
        address_ref = _rendezvous_address.options(
            scheduling_strategy=PlacementGroupSchedulingStrategy(pg, placement_group_bundle_index=0)
        ).remote()
        try:
            master_addr, master_port = ray.get(address_ref, timeout=timeout)
        except ray.exceptions.GetTimeoutError:
            ray.cancel(address_ref, force=True)
            raise RayWaitTimeout(
                f"task _rendezvous_address (picks rank 0's port) did not run within {timeout:g} s "
                f"(free now: {_free_resources()}); set {WAIT_TIMEOUT_ENV} to wait longer"
            ) from None
        return str(master_addr), int(master_port)

    @property
    def world_size(self) -> int:
        return len(self.workers)

    def run_all(self, method: str, *args: Any, **kwargs: Any) -> list[Any]:
        """Call `method(*args, **kwargs)` on every worker; results in rank order."""
        return ray.get([getattr(w, method).remote(*args, **kwargs) for w in self.workers])

    def run_sharded(self, method: str, per_worker_args: Sequence[tuple[Any, ...]], **kwargs: Any) -> list[Any]:
        """Call `method(*per_worker_args[rank], **kwargs)` on each worker."""
        if len(per_worker_args) != len(self.workers):
            raise ValueError(f"{len(per_worker_args)} argument sets for {len(self.workers)} workers")
        return ray.get(
            [getattr(w, method).remote(*a, **kwargs) for w, a in zip(self.workers, per_worker_args, strict=True)]
        )

    def shutdown(self) -> None:
        """End the workers gracefully (their atexit handlers run), then free the resources."""
        terminate_actors(self.workers)
        self.workers = []
        self.cluster.shutdown()
