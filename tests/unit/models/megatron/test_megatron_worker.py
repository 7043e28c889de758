"""The Megatron policy worker through Ray and `Policy`: logprobs, training, checkpoints.

On a CPU-only machine `Policy` starts the shimmed subclass (tests/unit/models/megatron/cpu_shim.py);
on GPU machines the library's own worker.
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
from tests.unit.policy_helpers import (
    check_checkpoint_round_trip,
    hf_logprobs,
    logprob_gap,
    policy_config,
)

pytestmark = [pytest.mark.mcore, pytest.mark.filterwarnings("ignore::UserWarning")]


def megatron_config(model: str, tp: int = 1) -> dict:
    return policy_config(model, precision="float32", megatron_cfg={"enabled": True, "tensor_model_parallel_size": tp})


@pytest.fixture(scope="module")
def batch(tiny_llama: str, test_assets: Path) -> dict[str, torch.Tensor]:
    tok = AutoTokenizer.from_pretrained(tiny_llama)
    return sft_batch(tok, load_chat_dataset(test_assets / "data" / "sft_train.jsonl")[:8], max_length=64)


@pytest.fixture(scope="module")
def policy(ray_cluster: object, tiny_llama: str):
    with pytest.MonkeyPatch.context() as mp:
        from nemo_rl.models.policy import policy as policy_module

        mp.setattr(policy_module, "MEGATRON_WORKER", cpu_shim.worker_class())
        p = Policy(megatron_config(tiny_llama), cluster_from_config(1, "auto"), init_reference_model=True)
    yield p
    p.shutdown()


def test_worker_reports_the_megatron_backend(policy: Policy) -> None:
    info = policy.info()[0]
    assert info["backend"] == "megatron" and info["tensor_model_parallel_size"] == 1
    assert info["dtype"] == "float32" and info["num_params"] > 0


def test_logprobs_match_a_direct_transformers_forward(policy: Policy, tiny_llama: str, batch, tracker) -> None:
    got = policy.get_logprobs(batch)
    err = logprob_gap(got, hf_logprobs(tiny_llama, batch), batch)
    tracker.track("max_abs_logprob_error", err)
    assert err < 1e-4


def test_training_steps_lower_the_loss(policy: Policy, batch, tiny_llama: str, tracker) -> None:
    first = policy.train(batch, NLLLoss())
    assert set(first) >= {"loss", "grad_norm", "lr", "num_tokens"}
    assert first["num_tokens"] == float(batch["token_mask"].sum())
    losses = [first["loss"]] + [policy.train(batch, NLLLoss())["loss"] for _ in range(3)]
    tracker.track("losses", losses)
    assert all(torch.isfinite(torch.tensor(losses)))
    assert losses[-1] < losses[0] - 0.1
    # The reference model is frozen: it still scores like the untouched checkpoint.
    ref = policy.get_logprobs(batch, reference=True)
    assert logprob_gap(ref, hf_logprobs(tiny_llama, batch), batch) < 1e-4


def test_checkpoint_round_trip_and_hf_export(policy: Policy, batch, tmp_path: Path) -> None:
    check_checkpoint_round_trip(policy, batch, tmp_path / "ck", 1e-4)


def test_generate_says_it_is_not_implemented(policy: Policy, batch) -> None:
    with pytest.raises(Exception, match="generation is not implemented for the Megatron policy worker"):
        policy.generate(
            {k: batch[k] for k in ("input_ids", "attention_mask")},
            {"max_new_tokens": 2, "temperature": 1.0, "top_p": 1.0, "seed": 0},
        )


def test_library_worker_refuses_cpu_with_a_clear_error(tiny_llama: str) -> None:
    if not cpu_shim.needed():
        pytest.skip("only meaningful without CUDA (this machine has a GPU)")
    from nemo_rl.models.megatron.megatron_policy_worker import MegatronPolicyWorker

    with pytest.raises(RuntimeError, match="needs a CUDA GPU"):
        MegatronPolicyWorker(megatron_config(tiny_llama))  # type: ignore[arg-type]
