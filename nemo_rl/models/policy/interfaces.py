"""What a policy worker needs from its callers, as small typed protocols and configs.

The worker receives its loss function as an argument (floors only point down: models/
never imports algorithms/).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import NotRequired, Protocol, TypedDict

from torch import Tensor


class LossFunction(Protocol):
    """`logprobs[b, t]` is log p(input_ids[b, t] | input_ids[b, :t]) (0 at t = 0).

    Returns the loss *summed* over the tokens it counts and metrics (also sums); the worker
    divides by the number of `token_mask` tokens in the global batch, so micro-batching and
    data parallelism do not change the result.
    """

    def __call__(self, logprobs: Tensor, batch: Mapping[str, Tensor]) -> tuple[Tensor, dict[str, Tensor]]: ...


class OptimizerConfig(TypedDict):
    lr: float
    weight_decay: float
    betas: list[float]


class SchedulerConfig(TypedDict):
    warmup_steps: int


class MegatronConfig(TypedDict, total=False):
    enabled: bool
    tensor_model_parallel_size: int


class TokenizerConfig(TypedDict, total=False):
    # upstream NeMo RL's key: the tokenizer's folder or Hugging Face name; None: model_name's own
    name: str | None


class PolicyConfig(TypedDict):
    model_name: str
    tokenizer: NotRequired[TokenizerConfig]
    precision: str  # auto | float32 | bfloat16
    train_global_batch_size: int
    train_micro_batch_size: int
    logprob_micro_batch_size: int
    max_total_sequence_length: int
    max_grad_norm: float
    optimizer: OptimizerConfig
    scheduler: SchedulerConfig
    megatron_cfg: MegatronConfig


def tokenizer_source(config: PolicyConfig) -> str:
    """Where the tokenizer comes from: `tokenizer.name` when set (upstream's key), else the
    model's own folder or Hub name (`model_name`)."""
    return (config.get("tokenizer") or {}).get("name") or config["model_name"]
