"""Driver-side handle on a group of policy workers (Ray actors): shards batches, gathers results."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from nemo_rl.distributed.reuse import keep, take
from nemo_rl.distributed.virtual_cluster import RayVirtualCluster, cluster_from_config
from nemo_rl.distributed.worker_group import RayWorkerGroup, resolve_class
from nemo_rl.models.generation.interfaces import GenerationConfig, GenerationOutput
from nemo_rl.models.policy.interfaces import LossFunction, PolicyConfig

# Workers are named by dotted path: only the chosen backend is imported (megatron is an extra).
DTENSOR_WORKER = "nemo_rl.models.policy.workers.dtensor_policy_worker.DTensorPolicyWorker"
MEGATRON_WORKER = "nemo_rl.models.megatron.megatron_policy_worker.MegatronPolicyWorker"


def shard_batch(batch: Mapping[str, Tensor], parts: int) -> list[dict[str, Tensor]]:
    """Split every tensor along dim 0 into `parts` equal shards (data parallelism)."""
    n = next(iter(batch.values())).shape[0]
    if n % parts:
        raise ValueError(f"batch of {n} rows cannot be split evenly over {parts} workers")
    size = n // parts
    return [{k: v[i * size : (i + 1) * size] for k, v in batch.items()} for i in range(parts)]


def worker_class(config: PolicyConfig) -> str:
    """The dotted path of the policy worker `config` asks for."""
    return MEGATRON_WORKER if config.get("megatron_cfg", {}).get("enabled", False) else DTENSOR_WORKER


class Policy:
    def __init__(self, config: PolicyConfig, cluster: RayVirtualCluster, init_reference_model: bool = False) -> None:
        self.cfg = config
        self.group = RayWorkerGroup(cluster, worker_class(config), config, init_reference_model=init_reference_model)
        self._kept_as: tuple[str, str, int, str] | None = None

    @property
    def world_size(self) -> int:
        return self.group.world_size

    def info(self) -> list[dict[str, Any]]:
        return self.group.run_all("info")

    def train(self, batch: Mapping[str, Tensor], loss_fn: LossFunction) -> dict[str, float]:
        results = self.group.run_sharded("train", [(s, loss_fn) for s in shard_batch(batch, self.world_size)])
        return dict(results[0])  # every rank reports the same all-reduced figures

    def evaluate(self, batch: Mapping[str, Tensor], loss_fn: LossFunction) -> dict[str, float]:
        results = self.group.run_sharded("evaluate", [(s, loss_fn) for s in shard_batch(batch, self.world_size)])
        return dict(results[0])

    def get_logprobs(self, batch: Mapping[str, Tensor], reference: bool = False) -> Tensor:
        parts = self.group.run_sharded(
            "get_logprobs", [(s,) for s in shard_batch(batch, self.world_size)], reference=reference
        )
        return torch.cat(parts)

    def generate(self, batch: Mapping[str, Tensor], cfg: GenerationConfig) -> GenerationOutput:
        """Prompts must be left-padded to one length; every shard then stops at the same step."""
        parts: list[GenerationOutput] = self.group.run_sharded(
            "generate", [(s,) for s in shard_batch(batch, self.world_size)], cfg=cfg
        )
        return GenerationOutput(
            output_ids=torch.cat([p["output_ids"] for p in parts]),
            logprobs=torch.cat([p["logprobs"] for p in parts]),
            response_mask=torch.cat([p["response_mask"] for p in parts]),
            prompt_length=parts[0]["prompt_length"],
            stop_reasons=[r for p in parts for r in p["stop_reasons"]],
        )

    # Paths are made absolute here: Ray workers do not share the driver's working directory.
    def save_checkpoint(self, path: str) -> None:
        self.group.run_all("save_checkpoint", str(Path(path).resolve()))

    def load_checkpoint(self, path: str) -> int:
        return int(self.group.run_all("load_checkpoint", str(Path(path).resolve()))[0])

    def shutdown(self) -> None:
        """Stop the workers; inside `reuse_workers()` (see nemo_rl.distributed.reuse) a policy
        that `start_policy` started keeps them for the next `start_policy` of its shape."""
        if self._kept_as is not None and self.group.workers and keep(self._kept_as, self, self.group.shutdown):
            return
        self.group.shutdown()


def start_policy(
    config: PolicyConfig, num_workers: int, gpus_per_worker: str | float, init_reference_model: bool = False
) -> Policy:
    """A Policy on `num_workers` workers (`gpus_per_worker`: a number or "auto", see
    cluster_from_config). Inside `reuse_workers()`, on the workers a policy of the same shape
    (worker class, number of workers, GPUs per worker) left: re-initialised for `config` by
    their `reinit` (the state of new workers: the model loaded again, a new optimizer, step 0),
    with no process to start and nothing to import again."""
    key = ("policy", worker_class(config), num_workers, str(gpus_per_worker))
    while (kept := take(key)) is not None:
        policy, stop = kept
        try:
            policy.group.run_all("reinit", config, init_reference_model)
        except Exception:  # noqa: BLE001  a kept worker that died or failed: stop it, start anew
            stop()
            continue
        policy.cfg = config
        return policy  # type: ignore[no-any-return]
    policy = Policy(config, cluster_from_config(num_workers, gpus_per_worker), init_reference_model)
    if hasattr(resolve_class(key[1]), "reinit"):  # workers that can be given a new run
        policy._kept_as = key
    return policy
