"""Test support: run megatron-core (0.16.x) on a CPU-only machine with gloo. Never used by nemo_rl.

megatron-core assumes CUDA in two places that a CPU forward/backward reaches:

1. `torch.cuda.current_device()` is used as a `device=` argument in many modules (the global
   memory buffer of the attention scores, rotary embeddings, ...). `install()` replaces it with a
   function returning "cpu", so those tensors are made on the CPU. It is only done when CUDA is
   unavailable, where the real function could only raise.
2. The model-parallel RNG tracker seeds and forks CUDA generators
   (`model_parallel_cuda_manual_seed`, `get_cuda_rng_tracker().fork()` around attention dropout).
   `install()` creates the tracker in megatron's inference mode, whose fork is a no-op; dropout is
   0 in our models, so nothing random is skipped.

Everything else (tensor-parallel linears, gloo collectives, the local layer spec) runs unchanged.
What stays GPU-only: tensor parallelism > 1 on one machine here would also work over gloo, but
the TP test is about NCCL on real devices and is marked num_gpus(2).

Use: `with cpu_shim.installed(): ...` in-process, or `CPU_WORKER` (a MegatronPolicyWorker
subclass that installs the shim in its own Ray worker process) where a worker class is named.
On a machine with CUDA both are no-ops / the plain worker, so the same tests run for real.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch

from nemo_rl.models.megatron.megatron_policy_worker import MegatronPolicyWorker

CPU_WORKER = "tests.unit.models.megatron.cpu_shim.CpuMegatronPolicyWorker"
GPU_WORKER = "nemo_rl.models.megatron.megatron_policy_worker.MegatronPolicyWorker"

_original_current_device: Callable[[], Any] | None = None


def needed() -> bool:
    """The shim is only for machines without CUDA."""
    return not torch.cuda.is_available()


def worker_class() -> str:
    """The worker to start: the shimmed subclass on CPU, the library's worker on GPU."""
    return CPU_WORKER if needed() else GPU_WORKER


def _cpu_device() -> str:
    return "cpu"


def install() -> None:
    """Apply both redirections (idempotent); only on a CPU-only machine."""
    global _original_current_device
    if not needed():
        return
    from megatron.core.tensor_parallel import random as mrandom

    if _original_current_device is None:
        _original_current_device = torch.cuda.current_device
        torch.cuda.current_device = _cpu_device  # type: ignore[assignment]
    mrandom.initialize_rng_tracker(inference_rng_tracker=True, force_reset=True)


def uninstall() -> None:
    """Undo install(): the real current_device, an uninitialised RNG tracker."""
    global _original_current_device
    if _original_current_device is not None:
        torch.cuda.current_device = _original_current_device
        _original_current_device = None
        from megatron.core.tensor_parallel import random as mrandom

        mrandom._CUDA_RNG_STATE_TRACKER = None
        mrandom._CUDA_RNG_STATE_TRACKER_INITIALIZED = False


@contextmanager
def installed() -> Iterator[None]:
    install()
    try:
        yield
    finally:
        uninstall()


class CpuMegatronPolicyWorker(MegatronPolicyWorker):
    """The library worker, with the shim installed in its (Ray worker) process first."""

    allow_cpu = True

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        install()
        super().__init__(*args, **kwargs)

    def _seed_rng(self, seed: int) -> None:
        torch.manual_seed(seed)  # the inference-mode tracker from install() needs no CUDA seeding
