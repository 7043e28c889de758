"""What every policy worker shares: the train / evaluate / score loops over micro-batches.

A backend (DTensor/FSDP2, Megatron-core) supplies the model, the optimizer and a few hooks:
how a worker's shard becomes the rows it computes on, how sums are reduced over data
parallelism, and how gradients are reduced and clipped.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterator, Mapping
from typing import Any

import torch
from torch import Tensor

from nemo_rl.models.policy.interfaces import LossFunction, PolicyConfig


def resolve_dtype(precision: str, on_gpu: bool) -> torch.dtype:
    if precision == "auto":
        return torch.bfloat16 if on_gpu else torch.float32
    table = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
    if precision not in table:
        raise ValueError(f"policy.precision must be auto, float32, bfloat16 or float16, got {precision!r}")
    return table[precision]


def token_logprobs(logits: Tensor, input_ids: Tensor) -> Tensor:
    """[B, T] log p(input_ids[:, t] | < t) in float32; 0 at t = 0."""
    logp = torch.log_softmax(logits[:, :-1].float(), dim=-1)
    picked = logp.gather(-1, input_ids[:, 1:, None]).squeeze(-1)
    return torch.nn.functional.pad(picked, (1, 0))


def micro_batches(batch: Mapping[str, Tensor], size: int) -> Iterator[dict[str, Tensor]]:
    n = next(iter(batch.values())).shape[0]
    for start in range(0, n, size):
        yield {k: v[start : start + size] for k, v in batch.items()}


class PolicyWorkerBase:
    cfg: PolicyConfig
    rank: int
    world_size: int
    device: torch.device
    dtype: torch.dtype
    model: Any
    reference_model: Any
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LRScheduler
    step: int

    def info(self) -> dict[str, Any]:
        """Where this worker runs and what it holds (backends add their own keys)."""
        return {
            "rank": self.rank,
            "world_size": self.world_size,
            "device": str(self.device),
            "dtype": str(self.dtype).removeprefix("torch."),
            "pid": os.getpid(),
            "num_params": sum(p.numel() for p in self.model.parameters()),
        }

    # ---- hooks ---------------------------------------------------------------------------
    def _local_batch(self, batch: Mapping[str, Tensor]) -> dict[str, Tensor]:
        """The rows this worker computes on, on its device."""
        return {k: v.to(self.device) for k, v in batch.items()}

    def _own_rows(self, t: Tensor) -> Tensor:
        """Of the rows computed, those this worker reports."""
        return t

    def _global_sum(self, value: Tensor) -> Tensor:
        """Sum over the data-parallel group."""
        raise NotImplementedError

    def _loss_scale(self) -> float:
        """Factor on each micro-batch loss / global tokens before backward."""
        return 1.0

    def _reduce_and_clip_grads(self, max_norm: float) -> float:
        """Finish the gradients (data-parallel reduction, clipping); return the global norm."""
        raise NotImplementedError

    def _forward_logprobs(self, model: Any, mb: Mapping[str, Tensor]) -> Tensor:
        raise NotImplementedError

    # ---- the shared loops ----------------------------------------------------------------
    def train(
        self, batch: Mapping[str, Tensor], loss_fn: LossFunction, micro_batch_size: int | None = None
    ) -> dict[str, float]:
        """One optimizer step on this worker's shard of the global batch."""
        self.model.train()
        self.optimizer.zero_grad(set_to_none=True)
        data = self._local_batch(batch)
        global_tokens = self._global_sum(data["token_mask"].sum()).clamp(min=1.0)
        loss_sum = torch.zeros((), device=self.device)
        metric_sums: dict[str, Tensor] = {}
        for mb in micro_batches(data, micro_batch_size or self.cfg["train_micro_batch_size"]):
            loss, metrics = loss_fn(self._forward_logprobs(self.model, mb), mb)
            (loss * self._loss_scale() / global_tokens).backward()
            loss_sum += loss.detach()
            for k, v in metrics.items():
                metric_sums[k] = metric_sums.get(k, torch.zeros((), device=self.device)) + v.detach().float()
        grad_norm = self._reduce_and_clip_grads(self.cfg["max_grad_norm"])
        lr = self.scheduler.get_last_lr()[0]
        if math.isfinite(grad_norm):  # a NaN/inf step is skipped, and reported through grad_norm
            self.optimizer.step()
        self.scheduler.step()
        self.step += 1
        out = {
            "loss": float(self._global_sum(loss_sum) / global_tokens),
            "grad_norm": grad_norm,
            "lr": float(lr),
            "num_tokens": float(global_tokens),
        }
        for k, v in metric_sums.items():
            out[k] = float(self._global_sum(v) / global_tokens)
        return out

    @torch.no_grad()
    def evaluate(self, batch: Mapping[str, Tensor], loss_fn: LossFunction) -> dict[str, float]:
        """Loss without a gradient step (validation)."""
        self.model.eval()
        data = self._local_batch(batch)
        global_tokens = self._global_sum(data["token_mask"].sum()).clamp(min=1.0)
        loss_sum = torch.zeros((), device=self.device)
        for mb in micro_batches(data, self.cfg["train_micro_batch_size"]):
            loss, _ = loss_fn(self._forward_logprobs(self.model, mb), mb)
            loss_sum += loss
        return {"loss": float(self._global_sum(loss_sum) / global_tokens), "num_tokens": float(global_tokens)}

    @torch.no_grad()
    def get_logprobs(self, batch: Mapping[str, Tensor], reference: bool = False) -> Tensor:
        """[B, T] token log-probabilities of this worker's rows, on CPU (the reference model's when asked)."""
        model = self.reference_model if reference else self.model
        if model is None:
            raise RuntimeError("this worker was started without a reference model")
        model.eval()
        data = self._local_batch(batch)
        out = [self._forward_logprobs(model, mb) for mb in micro_batches(data, self.cfg["logprob_micro_batch_size"])]
        return self._own_rows(torch.cat(out)).cpu()
