"""The DTensor policy worker through Ray: logprobs, training, FSDP2, checkpoints, generation."""

import pytest
import torch
from transformers import AutoTokenizer

from nemo_rl.algorithms.loss_functions import NLLLoss
from nemo_rl.data.datasets import load_chat_dataset
from nemo_rl.data.tokenize import pad_batch, prompt_ids, sft_batch
from nemo_rl.distributed.virtual_cluster import cluster_from_config
from nemo_rl.models.policy.policy import Policy
from tests.unit.policy_helpers import (
    check_checkpoint_round_trip,
    hf_logprobs,
    logprob_gap,
    one_worker_gpus,
    policy_config,
)


@pytest.fixture(scope="module")
def tokenizer(tiny_llama: str):
    return AutoTokenizer.from_pretrained(tiny_llama)


@pytest.fixture(scope="module")
def batch(tokenizer, test_assets):
    convs = load_chat_dataset(test_assets / "data" / "sft_train.jsonl")[:8]
    return sft_batch(tokenizer, convs, max_length=64)


@pytest.fixture(scope="module")
def policy(ray_cluster, tiny_llama: str, tokenizer):
    # After the tokenizer, whichever test comes first: loading one imports much of transformers
    # and torch.distributed in this process (seconds), time in which the actor's warm Ray
    # worker (testharness.warm_workers) finishes its own imports; the other way round,
    # this process waits for that worker, then imports.
    p = Policy(policy_config(tiny_llama), cluster_from_config(1, one_worker_gpus()))
    yield p
    p.shutdown()


def test_logprobs_match_a_direct_transformers_forward(policy: Policy, batch, tmp_path, tracker) -> None:
    # Against the weights the worker holds now (its HF export): other tests of this module
    # train the shared worker, and pytest-testmon may run them first.
    policy.save_checkpoint(str(tmp_path / "ck"))
    got = policy.get_logprobs(batch)
    err = logprob_gap(got, hf_logprobs(str(tmp_path / "ck" / "hf"), batch), batch)
    tracker.track("max_abs_logprob_error", err)
    tracker.log_max_mem("memory_after_logprobs")
    tol = 1e-4 if policy.info()[0]["dtype"] == "float32" else 5e-2
    assert err < tol


def test_training_steps_lower_the_loss(policy: Policy, batch, tracker) -> None:
    losses = [policy.train(batch, NLLLoss())["loss"] for _ in range(4)]
    tracker.track("losses", losses)
    assert losses[-1] < losses[0] - 0.1
    assert all(torch.isfinite(torch.tensor(losses)))


def test_checkpoint_round_trip(policy: Policy, batch, tmp_path) -> None:
    check_checkpoint_round_trip(
        policy, batch, tmp_path / "ck", 1e-4 if policy.info()[0]["dtype"] == "float32" else 5e-2
    )


def test_generation_is_seeded(policy: Policy, tokenizer) -> None:
    prompts = pad_batch(
        [prompt_ids(tokenizer, [{"role": "user", "content": "Compute 2 + 3."}])] * 2,
        tokenizer.pad_token_id,
        left=True,
    )
    cfg = {"max_new_tokens": 6, "temperature": 1.0, "top_p": 1.0, "seed": 11}
    a, b = policy.generate(prompts, cfg), policy.generate(prompts, cfg)
    assert torch.equal(a["output_ids"], b["output_ids"])
    assert a["output_ids"].shape[1] <= prompts["input_ids"].shape[1] + 6
