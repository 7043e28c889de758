"""Idle Ray workers started ahead of the actors that will use them, with torch and
transformers already imported.

Every Ray actor gets a worker process of its own; a policy worker's then spends most of its
start importing torch, torch.distributed.tensor and transformers (about 8 s of 11 s on an
H200 machine, bench/warm_worker_probe.py). A job that wants N warm workers connects with
`with_preload_hook(runtime_env)` as its runtime environment and then calls `prestart(N)`: the
local raylet starts N worker processes at once; they import those modules while the driver goes
on, and the job's next N actors whose runtime environment is the job's own start in them.
A test suite's sessions ask for them (tests/unit/conftest.py, under -n where cores are spare).

Ray 2.60 has no public call for that: `prestart` asks the raylet over its private gRPC API
(`real_ray.prestart_workers`: `NodeManagerService.PrestartWorkers`, the call behind Ray's own
per-CPU prestart), and does nothing where this Ray lacks it. The imports run in Ray's
`worker_process_setup_hook`, which every worker process of the job runs (the harness is
installed, so they import this module); only the first N to start claim a slot (a file the
driver made) and import: a worker started later for a small task or actor pays nothing. An
actor given a runtime environment of its own (env_vars) never gets a warm worker.
"""

from __future__ import annotations

import atexit
import importlib
import logging
import os
import shutil
from pathlib import Path
from typing import Any

from testharness import real_ray

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


def with_preload_hook(runtime_env: dict[str, Any]) -> dict[str, Any]:
    """`runtime_env` with this module's set-up hook: the job's workers that claim a slot preload."""
    return {**runtime_env, "worker_process_setup_hook": PRELOAD_HOOK}


def _slots(job_hex: str) -> Path:
    """This job's slot folder, in the Ray session's own folder (a job id is unique only
    within its cluster; the driver and its workers on this node see the same folder).
    Raises where there is no Ray session (or this Ray differs)."""
    ray = real_ray.imported()
    session = real_ray.session_dir(ray) if ray is not None else None
    if session is None:
        raise RuntimeError("no Ray session in this process")
    return Path(session, "testharness_warm_workers", job_hex)


def preload_if_claimed() -> None:
    """The job's worker set-up hook: `preload` in a process that claims one of the slots
    `prestart` made (removing the file is the claim: one process wins each), else nothing."""
    try:
        names = sorted(os.listdir(slots := _slots(os.environ.get("RAY_JOB_ID", ""))))
    except (OSError, RuntimeError):  # no slots (none asked for), or no session: no imports
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
    worker processes to start then preload (when the job was started `with_preload_hook`).
    False where this process is not connected, this Ray has no such call, or the raylet refused."""
    ray = real_ray.connected()
    if count <= 0 or ray is None:
        return False
    slots: Path | None = None
    try:
        slots = _slots(real_ray.job_hex(ray))
        slots.mkdir(parents=True, exist_ok=True)
        atexit.register(shutil.rmtree, slots, ignore_errors=True)
        for i in range(count):
            (slots / str(i)).touch()
        real_ray.prestart_workers(ray, count, keep_alive_s)
        return True
    except Exception as exc:  # noqa: BLE001  a private API: any Ray that differs starts actors cold
        if slots is not None:
            shutil.rmtree(slots, ignore_errors=True)
        log.info("no warm Ray workers (this Ray cannot prestart them: %s)", exc)
        return False
