"""Pieces of the training loops that SFT and GRPO share."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, TypedDict

from nemo_rl.algorithms.loss_functions import NLLLoss
from nemo_rl.data.datasets import Message, batches
from nemo_rl.data.tokenize import sft_batch
from nemo_rl.models.policy.interfaces import PolicyConfig
from nemo_rl.models.policy.policy import Policy
from nemo_rl.utils.checkpoint import CheckpointManager
from nemo_rl.utils.logger import Logger


class CheckpointingConfig(TypedDict):
    enabled: bool
    checkpoint_dir: str
    save_period: int
    keep_top_k: int


class ClusterConfig(TypedDict):
    num_workers: int
    gpus_per_worker: str | float


def local_path_or_name(name: str) -> str:
    """Absolute path for a local folder (workers may run elsewhere), else the hub name unchanged."""
    return str(Path(name).resolve()) if Path(name).exists() else name


def resolve_sources(pcfg: PolicyConfig) -> None:
    """policy.model_name and policy.tokenizer.name (when set) through local_path_or_name, in place."""
    pcfg["model_name"] = local_path_or_name(pcfg["model_name"])
    tokenizer = pcfg.get("tokenizer")
    if tokenizer and tokenizer.get("name"):
        tokenizer["name"] = local_path_or_name(str(tokenizer["name"]))


def skip(it: Iterator[Any], n: int) -> Iterator[Any]:
    """Advance a (seeded, hence reproducible) batch iterator past what a resumed run consumed."""
    for _ in range(n):
        next(it)
    return it


def due(step: int, period: int, last_step: int) -> bool:
    """Every `period` steps and at the last step; never when period <= 0."""
    return period > 0 and (step % period == 0 or step == last_step)


def mean_nll(
    policy: Policy,
    tokenizer: Any,
    conversations: Sequence[Sequence[Message]],
    batch_size: int,
    num_batches: int,
    max_length: int,
) -> float:
    """Mean negative log-likelihood per assistant token over the first `num_batches` full batches
    of `conversations` (in order): SFT's val/loss and evaluation's eval/loss."""
    loss_fn = NLLLoss()
    total, tokens = 0.0, 0.0
    it = batches(conversations, batch_size, seed=0, shuffle=False)
    for _ in range(num_batches):
        out = policy.evaluate(sft_batch(tokenizer, next(it), max_length), loss_fn)
        total += out["loss"] * out["num_tokens"]
        tokens += out["num_tokens"]
    return total / max(tokens, 1.0)


def resume_from_latest(
    policy: Policy, ckpt: CheckpointManager, cfg: CheckpointingConfig, logger: Logger, name: str
) -> int:
    """Load the newest complete checkpoint when checkpointing is on; the step to continue from."""
    latest = ckpt.latest() if cfg["enabled"] else None
    if latest is None:
        return 0
    step = policy.load_checkpoint(str(latest / "policy"))
    logger.console.print(f"[{name}] resumed from {latest} at step {step}")
    return step


def run_start_metrics(policy: Policy, step: int) -> dict[str, float]:
    """Scalars logged with a run's first step (`step` is the one it trains first): where this run
    began and on how many policy workers. A resumed run logs them beside the first run's, so
    the event files show each resume (`run/first_step` = the checkpoint's step + 1) and the
    data-parallel size each part ran with."""
    return {"run/first_step": float(step), "run/num_workers": float(policy.world_size)}


def save_if_due(
    policy: Policy,
    ckpt: CheckpointManager,
    cfg: CheckpointingConfig,
    step: int,
    last_step: int,
    metrics: Mapping[str, float],
) -> None:
    if cfg["enabled"] and due(step, cfg["save_period"], last_step):
        policy.save_checkpoint(str(ckpt.step_dir(step) / "policy"))
        ckpt.finalize(step, {"step": step, **metrics})
