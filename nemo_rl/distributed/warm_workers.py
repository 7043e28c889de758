"""Idle Ray workers started ahead of the actors that will use them, with torch and
transformers already imported.

Every Ray actor gets a worker process of its own; a policy worker's then spends most of its
start importing torch, torch.distributed.tensor and transformers (about 8 s of 11 s on an
H200 machine, bench/warm_worker_probe.py). A job that asks for N warm workers
(`init_ray(warm_workers=N)`) has the local raylet start N worker processes at once; they
import those modules while the driver goes on, and the job's next N actors whose runtime
environment is the job's own start in them.

Ray 2.60 has no public call for that: `prestart` asks the raylet over its private gRPC API
(`NodeManagerService.PrestartWorkers`, the call behind Ray's own per-CPU prestart), and does
nothing where this Ray lacks it. The imports run in Ray's `worker_process_setup_hook`, which
every worker process of the job runs; only the first N to start claim a slot (a file the
driver made) and import: a worker started later for a small task or actor pays nothing. An
actor given a runtime environment of its own (env_vars) never gets a warm worker:
RayWorkerGroup runs its workers in the job's environment where it can (a rank's variables
come with its constructor).
"""

from __future__ import annotations

import atexit
import importlib
import logging
import os
import shutil
from pathlib import Path
from typing import Any

import ray

log = logging.getLogger(__name__)

PRELOAD_HOOK = f"{__name__}.preload_if_claimed"
KEEP_ALIVE_S = 600  # an unused warm worker is ended after this long


# What loading a tokenizer and a decoder model imports in transformers 5 beyond its top-level
# classes (about 630 modules: torch._dynamo, torch.distributed's, generation, quantizers, the
# fast tokenizers): 3.9-4.2 s of a warm policy worker's constructor on an H100 machine,
# 0.8 s on the CPU box. A transformers without one of them skips it.
LOAD_TIME_MODULES = (
    "transformers.masking_utils",
    "transformers.modeling_layers",
    "transformers.generation",
    "transformers.models.auto.tokenization_auto",
    "transformers.tokenization_utils_tokenizers",
    "transformers.tokenization_python",
    "transformers.utils.type_validators",
)


def preload() -> None:
    """What a policy worker imports before its model loads. No CUDA call: Ray sets
    CUDA_VISIBLE_DEVICES only when it gives the process its actor."""
    import torch  # noqa: F401
    import torch.distributed.tensor  # noqa: F401  (torch's sympy-based shape code comes with it)
    from transformers import AutoModelForCausalLM  # noqa: F401

    for name in LOAD_TIME_MODULES:
        try:
            importlib.import_module(name)
        except ImportError:
            continue


def _slots(job_hex: str) -> Path:
    """This job's slot folder, in the Ray session's own folder (a job id is unique only
    within its cluster; the driver and its workers on this node see the same folder)."""
    node: Any = ray._private.worker.global_worker.node  # private: the session of this process
    return Path(node.get_session_dir_path(), "nrl_warm_workers", job_hex)


def preload_if_claimed() -> None:
    """The job's worker set-up hook: `preload` in a process that claims one of the slots
    `prestart` made (removing the file is the claim: one process wins each), else nothing."""
    try:
        names = sorted(os.listdir(slots := _slots(os.environ.get("RAY_JOB_ID", ""))))
    except Exception:  # noqa: BLE001  no slots (none asked for), or a Ray that differs: no imports
        return
    for name in names:
        try:
            os.unlink(slots / name)
        except OSError:
            continue  # another process claimed it
        preload()
        return


def prestart(count: int, keep_alive_s: int = KEEP_ALIVE_S) -> bool:
    """Ask this node's raylet to start `count` idle workers for this job and its runtime
    environment (the raylet starts at most one per free CPU); the first `count` of the job's
    worker processes to start then preload. False where this Ray has no such call, or the
    raylet refused."""
    if count <= 0:
        return False
    job = ray.get_runtime_context().get_job_id()
    slots: Path | None = None
    try:
        slots = _slots(job)
        slots.mkdir(parents=True, exist_ok=True)
        atexit.register(shutil.rmtree, slots, ignore_errors=True)
        for i in range(count):
            (slots / str(i)).touch()
        from ray._private.grpc_utils import init_grpc_channel
        from ray.core.generated import common_pb2, node_manager_pb2, node_manager_pb2_grpc

        # Private and generated modules: nothing to type-check against.
        worker: Any = ray._private.worker.global_worker
        messages: Any = node_manager_pb2
        common: Any = common_pb2
        request = messages.PrestartWorkersRequest(
            language=common.PYTHON, job_id=bytes.fromhex(job), keep_alive_duration_secs=keep_alive_s, num_workers=count
        )
        job_config = worker.core_worker.get_job_config()
        request.runtime_env_info.ParseFromString(job_config.runtime_env_info.SerializeToString())
        node = worker.node
        channel = init_grpc_channel(f"{node.node_ip_address}:{node.node_manager_port}")
        node_manager_pb2_grpc.NodeManagerServiceStub(channel).PrestartWorkers(request, timeout=30)
        return True
    except Exception as exc:  # noqa: BLE001  a private API: any Ray that differs starts actors cold
        if slots is not None:
            shutil.rmtree(slots, ignore_errors=True)
        log.info("no warm Ray workers (this Ray cannot prestart them: %s)", exc)
        return False
