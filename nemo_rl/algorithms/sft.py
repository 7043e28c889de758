"""Supervised fine-tuning: the loop, validation, checkpoints and resume."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, TypedDict

from nemo_rl.algorithms.loss_functions import NLLLoss
from nemo_rl.algorithms.utils import (
    CheckpointingConfig,
    ClusterConfig,
    due,
    mean_nll,
    resolve_sources,
    resume_from_latest,
    run_start_metrics,
    save_if_due,
    skip,
)
from nemo_rl.data.datasets import Message, batches, load_chat_dataset
from nemo_rl.data.tokenize import sft_batch
from nemo_rl.distributed.ray_cluster import init_ray
from nemo_rl.models.policy.interfaces import PolicyConfig, tokenizer_source
from nemo_rl.models.policy.policy import Policy, start_policy
from nemo_rl.utils.checkpoint import CheckpointManager
from nemo_rl.utils.logger import Logger, LoggerConfig


class SFTConfig(TypedDict):
    max_num_steps: int
    val_period: int
    val_batches: int
    val_global_batch_size: int
    seed: int


class DataConfig(TypedDict):
    train_path: str
    val_path: str
    shuffle: bool


class SFTMasterConfig(TypedDict):
    sft: SFTConfig
    policy: PolicyConfig
    data: DataConfig
    cluster: ClusterConfig
    checkpointing: CheckpointingConfig
    logger: LoggerConfig


def validate(policy: Policy, tokenizer: Any, val_data: list[list[Message]], cfg: SFTMasterConfig) -> dict[str, float]:
    sft, max_length = cfg["sft"], cfg["policy"]["max_total_sequence_length"]
    return {
        "val/loss": mean_nll(policy, tokenizer, val_data, sft["val_global_batch_size"], sft["val_batches"], max_length)
    }


def sft_train(cfg: SFTMasterConfig) -> dict[str, float]:
    """Train for sft.max_num_steps (resuming from the newest checkpoint); return the last metrics."""
    from transformers import AutoTokenizer

    init_ray()
    sft, pcfg, ckpt_cfg = cfg["sft"], cfg["policy"], cfg["checkpointing"]
    resolve_sources(pcfg)
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_source(pcfg))
    train_data = load_chat_dataset(cfg["data"]["train_path"])
    val_data = load_chat_dataset(cfg["data"]["val_path"])
    policy = start_policy(pcfg, cfg["cluster"]["num_workers"], cfg["cluster"]["gpus_per_worker"])
    logger = Logger(cfg["logger"])
    ckpt = CheckpointManager(ckpt_cfg["checkpoint_dir"], ckpt_cfg["keep_top_k"])
    try:
        step = resume_from_latest(policy, ckpt, ckpt_cfg, logger, "sft")
        info = policy.info()[0]
        logger.console.print(
            f"[sft] {policy.world_size} worker(s) on {info['device']} ({info['dtype']}), "
            f"{info['num_params']:,} parameters per worker, steps {step + 1}..{sft['max_num_steps']}"
        )
        train_iter = skip(
            batches(train_data, pcfg["train_global_batch_size"], sft["seed"], cfg["data"]["shuffle"]), step
        )
        loss_fn = NLLLoss()
        metrics: dict[str, float] = {}
        first_step = step + 1
        while step < sft["max_num_steps"]:
            step += 1
            t0 = time.perf_counter()
            batch = sft_batch(tokenizer, next(train_iter), pcfg["max_total_sequence_length"])
            out = policy.train(batch, loss_fn)
            elapsed = time.perf_counter() - t0
            metrics = {
                "train/loss": out["loss"],
                "train/grad_norm": out["grad_norm"],
                "train/lr": out["lr"],
                "train/tokens_per_sec": float(batch["attention_mask"].sum()) / elapsed,
                "timing/step_s": elapsed,
            }
            if step == first_step:
                metrics.update(run_start_metrics(policy, step))
            if due(step, sft["val_period"], sft["max_num_steps"]):
                metrics.update(validate(policy, tokenizer, val_data, cfg))
            logger.log(metrics, step)
            save_if_due(policy, ckpt, ckpt_cfg, step, sft["max_num_steps"], metrics)
        return metrics
    finally:
        logger.close()
        policy.shutdown()


def default_config_path() -> Path:
    return Path(__file__).resolve().parents[2] / "examples" / "configs" / "sft.yaml"
