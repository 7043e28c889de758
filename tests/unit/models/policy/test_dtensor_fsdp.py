"""FSDP2: a sharded group of policy workers trains exactly like one worker.

In a module of its own so no other module's workers hold GPUs while it needs them all.
"""

from concurrent.futures import ThreadPoolExecutor

import pytest
from transformers import AutoTokenizer

from nemo_rl.algorithms.loss_functions import NLLLoss
from nemo_rl.data.datasets import load_chat_dataset
from nemo_rl.data.tokenize import sft_batch
from nemo_rl.distributed.virtual_cluster import auto_gpus_per_worker, cluster_from_config
from nemo_rl.models.policy.policy import Policy
from tests.unit.policy_helpers import policy_config


@pytest.fixture(scope="module")
def batch(tiny_llama: str, test_assets):
    tok = AutoTokenizer.from_pretrained(tiny_llama)
    return sft_batch(tok, load_chat_dataset(test_assets / "data" / "sft_train.jsonl")[:8], max_length=64)


@pytest.mark.parametrize("workers", [2])
def test_fsdp2_matches_a_single_worker(ray_cluster, tiny_llama: str, batch, workers: int, tracker) -> None:
    """Same data, same init, same device: the sharded group reports the same losses as one
    worker. Both run where the group can (GPUs when there is one per worker, else the CPU),
    so only the sharding differs; on a one-GPU machine neither holds the GPU under -n. The two
    run side by side (their workers' start-up is most of the time)."""
    gpus = auto_gpus_per_worker(workers)

    def losses(n: int) -> list[float]:
        p = Policy(policy_config(tiny_llama, precision="float32"), cluster_from_config(n, gpus))
        try:
            return [p.train(batch, NLLLoss())["loss"] for _ in range(2)]
        finally:
            p.shutdown()

    with ThreadPoolExecutor(2) as pool:
        results = dict(zip((1, workers), pool.map(losses, (1, workers)), strict=True))
    tracker.track("losses_1", results[1])
    tracker.track(f"losses_{workers}", results[workers])
    assert results[workers] == pytest.approx(results[1], rel=1e-4, abs=1e-4)
