"""Pieces of the training loops that SFT and GRPO share."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, TypedDict

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


def skip(it: Iterator[Any], n: int) -> Iterator[Any]:
    """Advance a (seeded, hence reproducible) batch iterator past what a resumed run consumed."""
    for _ in range(n):
        next(it)
    return it


def due(step: int, period: int, last_step: int) -> bool:
    """Every `period` steps and at the last step; never when period <= 0."""
    return period > 0 and (step % period == 0 or step == last_step)


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
