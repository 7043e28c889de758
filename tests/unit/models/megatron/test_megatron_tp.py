"""Tensor parallelism 2 through the Megatron worker.

In a module of its own: the worker module's shared policy holds a GPU until that module ends,
and TP=2 needs both GPUs of a two-GPU machine.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from transformers import AutoTokenizer

from nemo_rl.algorithms.loss_functions import NLLLoss
from nemo_rl.data.datasets import load_chat_dataset
from nemo_rl.data.tokenize import sft_batch
from nemo_rl.distributed.virtual_cluster import cluster_from_config
from nemo_rl.models.policy.policy import Policy
from tests.unit.models.megatron import cpu_shim
from tests.unit.models.megatron.test_megatron_worker import megatron_config

pytestmark = [pytest.mark.mcore, pytest.mark.filterwarnings("ignore::UserWarning")]


@pytest.fixture(scope="module")
def batch(tiny_llama: str, test_assets: Path) -> dict[str, torch.Tensor]:
    tok = AutoTokenizer.from_pretrained(tiny_llama)
    return sft_batch(tok, load_chat_dataset(test_assets / "data" / "sft_train.jsonl")[:8], max_length=64)


def check_tensor_parallel_2(tiny_llama: str, batch, tmp_path: Path, tracker) -> None:
    """TP=2: same logprobs and losses as TP=1; its checkpoint loads at TP=1 and scores the same."""
    results = {}
    for tp in (1, 2):
        p = Policy(megatron_config(tiny_llama, tp), cluster_from_config(tp, "auto"))
        try:
            logp = p.get_logprobs(batch)
            results[tp] = (logp, [p.train(batch, NLLLoss())["loss"] for _ in range(2)])
            if tp == 2:
                p.save_checkpoint(str(tmp_path / "tp2"))
                after_tp2 = p.get_logprobs(batch)
        finally:
            p.shutdown()
    tracker.track("losses_tp1", results[1][1])
    tracker.track("losses_tp2", results[2][1])
    mask = batch["attention_mask"].bool()
    assert (results[2][0][mask] - results[1][0][mask]).abs().max().item() < 1e-4
    assert results[2][1] == pytest.approx(results[1][1], rel=1e-4, abs=1e-4)
    p = Policy(megatron_config(tiny_llama, 1), cluster_from_config(1, "auto"))
    try:
        assert p.load_checkpoint(str(tmp_path / "tp2")) == 2
        assert (p.get_logprobs(batch)[mask] - after_tp2[mask]).abs().max().item() < 1e-4
    finally:
        p.shutdown()


@pytest.mark.num_gpus(2)
def test_tensor_parallel_2_on_two_gpus(
    ray_cluster: object, megatron_worker: str, tiny_llama: str, batch, tmp_path: Path, tracker
) -> None:
    """TP=2 over NCCL on two GPUs."""
    check_tensor_parallel_2(tiny_llama, batch, tmp_path, tracker)


def test_tensor_parallel_2_over_gloo_on_cpu(
    ray_cluster: object, megatron_worker: str, tiny_llama: str, batch, tmp_path: Path, tracker
) -> None:
    """The same check on two CPU workers over gloo (megatron's TP collectives run there too)."""
    if not cpu_shim.needed():
        pytest.skip("CPU-only variant; on GPU machines test_tensor_parallel_2_on_two_gpus covers TP=2")
    check_tensor_parallel_2(tiny_llama, batch, tmp_path, tracker)
