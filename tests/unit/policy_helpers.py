"""Helpers shared by the policy-worker tests (DTensor and Megatron).

Kept out of conftest.py on purpose: every test's static import closure holds its
conftest chain, so library imports there would tie every test to those modules
(remote-aware selection re-runs tests that start processes on any edit in that closure).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import torch

from nemo_rl.algorithms.loss_functions import NLLLoss

if TYPE_CHECKING:
    from nemo_rl.models.policy.policy import Policy


# A tiny model's one-worker run uses a sliver of a GPU: under -n, up to four such tests share one
# through Ray's fractional GPUs instead of taking it in turn (the GPU chain was the run's tail).
SHARED_GPU_FRACTION = 0.25


def one_worker_gpus() -> str:
    """`cluster.gpus_per_worker` for a one-worker run of a tiny model: a quarter of a GPU when
    the connected Ray cluster has one, else `auto` (the CPU). Never for a group of several
    workers (two ranks on one GPU would break NCCL). A test that measures GPU memory may share
    too: under -n `tracker.get_max_mem` reads the test's own processes."""
    import ray

    return str(SHARED_GPU_FRACTION) if ray.cluster_resources().get("GPU", 0) >= 1 else "auto"


def policy_config(model_path: str, **overrides: object) -> dict:
    """A small PolicyConfig for tests."""
    cfg: dict = {
        "model_name": model_path,
        "precision": "auto",
        "train_global_batch_size": 8,
        "train_micro_batch_size": 4,
        "logprob_micro_batch_size": 4,
        "max_total_sequence_length": 64,
        "max_grad_norm": 1.0,
        "optimizer": {"lr": 1e-3, "weight_decay": 0.0, "betas": [0.9, 0.999]},
        "scheduler": {"warmup_steps": 0},
        "megatron_cfg": {"enabled": False, "tensor_model_parallel_size": 1},
    }
    cfg.update(overrides)
    return cfg


def hf_logprobs(model_path: str, batch: dict) -> torch.Tensor:
    """The reference: [B, T] token log-probabilities from a plain float32 transformers forward (0 at t = 0)."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32).eval()
    with torch.no_grad():
        logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
    logp = torch.log_softmax(logits[:, :-1].float(), -1).gather(-1, batch["input_ids"][:, 1:, None]).squeeze(-1)
    return torch.nn.functional.pad(logp, (1, 0))


def logprob_gap(a: torch.Tensor, b: torch.Tensor, batch: dict) -> float:
    """Largest |a - b| over the scored tokens (the attention mask; position 0 has no score)."""
    mask = batch["attention_mask"].bool().clone()
    mask[:, 0] = False
    return (a[mask] - b[mask]).abs().max().item()


def check_checkpoint_round_trip(policy: Policy, batch: dict, ckpt_dir: Path, hf_tol: float) -> None:
    """Train, save, train on: loading restores the saved scores, and the HF export (plain
    transformers) scores like the checkpoint. Shared by the DTensor and Megatron workers."""
    policy.train(batch, NLLLoss())  # a step of its own: no reliance on test order
    policy.save_checkpoint(str(ckpt_dir))
    saved = policy.get_logprobs(batch)
    policy.train(batch, NLLLoss())
    assert not torch.allclose(policy.get_logprobs(batch), saved)
    assert policy.load_checkpoint(str(ckpt_dir)) >= 1
    assert torch.allclose(policy.get_logprobs(batch), saved, atol=1e-6)
    assert logprob_gap(hf_logprobs(str(ckpt_dir / "hf"), batch), saved, batch) < hf_tol
