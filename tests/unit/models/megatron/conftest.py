"""Fixtures of the megatron-core tests (marker `mcore`; run with --mcore-only).

Nothing here imports megatron, torch or the CPU shim at module level: pytest loads this file in
every run that walks the folder, also one that collects none of its tests (a default run under
--testmon leaves the mcore files out whole), and importing torch alone takes seconds.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    import torch


@pytest.fixture(scope="module")
def megatron_single_rank() -> Iterator[None]:
    """torch.distributed (world size 1) + megatron model-parallel state (TP=1) in this process.

    gloo with the CPU shim when there is no GPU, nccl on GPU 0 otherwise; torn down after the module.
    """
    import torch
    import torch.distributed as dist
    from megatron.core import parallel_state, tensor_parallel

    from tests.unit.models.megatron import cpu_shim

    if dist.is_initialized():
        pytest.fail("torch.distributed is already initialised in the pytest process")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    on_gpu = torch.cuda.is_available()
    if on_gpu:
        torch.cuda.set_device(0)
    dist.init_process_group("nccl" if on_gpu else "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
    parallel_state.initialize_model_parallel(1, 1)
    if on_gpu:
        tensor_parallel.model_parallel_cuda_manual_seed(1234)
    else:
        cpu_shim.install()
    try:
        yield
    finally:
        cpu_shim.uninstall()
        parallel_state.destroy_model_parallel()
        dist.destroy_process_group()


@pytest.fixture
def megatron_worker(monkeypatch: pytest.MonkeyPatch) -> str:
    """Make `Policy` start the shimmed worker on CPU (the library's own worker on GPU); its path."""
    from nemo_rl.models.policy import policy
    from tests.unit.models.megatron import cpu_shim

    monkeypatch.setattr(policy, "MEGATRON_WORKER", cpu_shim.worker_class())
    return cpu_shim.worker_class()


def device() -> torch.device:
    import torch

    return torch.device("cuda", 0) if torch.cuda.is_available() else torch.device("cpu")
