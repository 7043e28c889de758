"""Idle Ray workers started ahead of the actors that will use them, with torch and
transformers already imported.

Every Ray actor gets a worker process of its own; a policy worker's then spends most of its
start importing torch, torch.distributed.tensor and transformers (about 8 s of 11 s on an
H200 machine, bench/warm_worker_probe.py). A job that asks for warm workers
(`init_ray(warm_workers=N)`) runs `preload` in each of its worker processes as they start
(Ray's `worker_process_setup_hook`) and has the local raylet start N of them at once, so the
job's next N actors whose runtime environment is the job's own start in a process that is
already there and already imported those modules.

Ray 2.60 has no public call for that: `prestart` asks the raylet over its private gRPC API
(`NodeManagerService.PrestartWorkers`, the call behind Ray's own per-CPU prestart), and does
nothing where this Ray lacks it. An actor given a runtime environment of its own (env_vars)
never gets a warm worker: RayWorkerGroup gives a group of one none.
"""

from __future__ import annotations

import logging
from typing import Any

import ray

log = logging.getLogger(__name__)

PRELOAD_HOOK = f"{__name__}.preload"
KEEP_ALIVE_S = 600  # an unused warm worker is ended after this long


def preload() -> None:
    """What a policy worker imports before its model loads (a worker process set-up hook).
    No CUDA call: Ray sets CUDA_VISIBLE_DEVICES only when it gives the process its actor."""
    import torch  # noqa: F401
    import torch.distributed.tensor  # noqa: F401  (torch's sympy-based shape code comes with it)
    from transformers import AutoModelForCausalLM  # noqa: F401


def prestart(count: int, keep_alive_s: int = KEEP_ALIVE_S) -> bool:
    """Ask this node's raylet to start `count` idle workers for this job and its runtime
    environment (the raylet starts at most one per free CPU). False where this Ray has no
    such call, or the raylet refused."""
    if count <= 0:
        return False
    try:
        from ray._private.grpc_utils import init_grpc_channel
        from ray.core.generated import common_pb2, node_manager_pb2, node_manager_pb2_grpc

        # Private and generated modules: nothing to type-check against.
        worker: Any = ray._private.worker.global_worker
        messages: Any = node_manager_pb2
        common: Any = common_pb2
        request = messages.PrestartWorkersRequest(
            language=common.PYTHON,
            job_id=bytes.fromhex(ray.get_runtime_context().get_job_id()),
            keep_alive_duration_secs=keep_alive_s,
            num_workers=count,
        )
        job_config = worker.core_worker.get_job_config()
        request.runtime_env_info.ParseFromString(job_config.runtime_env_info.SerializeToString())
        node = worker.node
        channel = init_grpc_channel(f"{node.node_ip_address}:{node.node_manager_port}")
        node_manager_pb2_grpc.NodeManagerServiceStub(channel).PrestartWorkers(request, timeout=30)
        return True
    except Exception as exc:  # noqa: BLE001  a private API: any Ray that differs starts actors cold
        log.info("no warm Ray workers (this Ray cannot prestart them: %s)", exc)
        return False
