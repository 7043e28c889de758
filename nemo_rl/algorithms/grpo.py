"""GRPO on math: sample G responses per prompt, score them, push up the better-than-group ones."""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TypedDict

import torch
from torch import Tensor

from nemo_rl.algorithms.config_checks import find_sft_export
from nemo_rl.algorithms.loss_functions import ClippedPGLoss
from nemo_rl.algorithms.utils import (
    CheckpointingConfig,
    ClusterConfig,
    due,
    resolve_sources,
    resume_from_latest,
    run_start_metrics,
    save_if_due,
    skip,
)
from nemo_rl.data.datasets import MathProblem, batches, load_math_dataset
from nemo_rl.data.tokenize import pad_batch, prompt_ids
from nemo_rl.distributed.ray_cluster import init_ray
from nemo_rl.environments.math_environment import MathEnvironment
from nemo_rl.models.generation.interfaces import GenerationConfig, GenerationOutput
from nemo_rl.models.policy.interfaces import PolicyConfig, tokenizer_source
from nemo_rl.models.policy.policy import Policy, start_policy
from nemo_rl.utils.checkpoint import CheckpointManager
from nemo_rl.utils.logger import Logger, LoggerConfig


class GRPOConfig(TypedDict):
    max_num_steps: int
    num_prompts_per_step: int
    num_generations_per_prompt: int
    normalize_rewards: bool
    val_period: int
    val_num_prompts: int
    seed: int


class LossConfig(TypedDict):
    ratio_clip_min: float
    ratio_clip_max: float
    kl_coef: float


class GRPOPolicyConfig(PolicyConfig):
    generation: GenerationConfig
    init_from_sft: str | None


class MathDataConfig(TypedDict):
    train_path: str
    val_path: str
    shuffle: bool


class EnvConfig(TypedDict):
    num_workers: int


class GRPOMasterConfig(TypedDict):
    grpo: GRPOConfig
    loss_fn: LossConfig
    policy: GRPOPolicyConfig
    data: MathDataConfig
    env: EnvConfig
    cluster: ClusterConfig
    checkpointing: CheckpointingConfig
    logger: LoggerConfig


def group_advantages(rewards: Tensor, group_size: int, normalize: bool, eps: float = 1e-6) -> Tensor:
    """Reward minus its group's mean (optionally over the group's std); rows grouped consecutively."""
    if rewards.numel() % group_size:
        raise ValueError(f"{rewards.numel()} rewards do not form groups of {group_size}")
    grouped = rewards.float().view(-1, group_size)
    adv = grouped - grouped.mean(dim=1, keepdim=True)
    if normalize:
        adv = adv / (grouped.std(dim=1, keepdim=True) + eps)  # all-equal groups stay at 0
    return adv.reshape(-1)


def resolve_sft_init(path: str) -> str:
    """An SFT checkpoint dir (or a step in it) -> its Hugging Face export folder."""
    export = find_sft_export(path)
    if export is None:
        raise FileNotFoundError(f"no SFT checkpoint with an hf/ export under {path}")
    return str(export)


def decode_responses(tokenizer: Any, out: GenerationOutput) -> list[str]:
    texts = []
    for ids, mask in zip(out["output_ids"], out["response_mask"], strict=True):
        texts.append(tokenizer.decode(ids[mask.bool()].tolist(), skip_special_tokens=True))
    return texts


def rollout(
    policy: Policy, tokenizer: Any, problems: Sequence[MathProblem], repeats: int, gen_cfg: GenerationConfig
) -> tuple[dict[str, Tensor], GenerationOutput]:
    prompts = [
        prompt_ids(tokenizer, [{"role": "user", "content": p["problem"]}]) for p in problems for _ in range(repeats)
    ]
    batch = pad_batch(prompts, tokenizer.pad_token_id, left=True)
    return batch, policy.generate(batch, gen_cfg)


def validate(
    policy: Policy, tokenizer: Any, env: MathEnvironment, problems: Sequence[MathProblem], gen_cfg: GenerationConfig
) -> dict[str, float]:
    greedy = GenerationConfig(
        max_new_tokens=gen_cfg["max_new_tokens"], temperature=0.0, top_p=1.0, seed=gen_cfg["seed"]
    )
    n = len(problems) - len(problems) % policy.world_size
    _, out = rollout(policy, tokenizer, problems[:n], 1, greedy)
    rewards = env.score(decode_responses(tokenizer, out), [p["answer"] for p in problems[:n]])
    return {"val/accuracy": sum(rewards) / max(len(rewards), 1)}


def grpo_train(cfg: GRPOMasterConfig) -> dict[str, float]:
    from transformers import AutoTokenizer

    init_ray()
    g, pcfg, ckpt_cfg, lcfg = cfg["grpo"], cfg["policy"], cfg["checkpointing"], cfg["loss_fn"]
    if pcfg.get("init_from_sft"):
        pcfg["model_name"] = resolve_sft_init(str(pcfg["init_from_sft"]))
    resolve_sources(pcfg)
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_source(pcfg))
    train_data = load_math_dataset(cfg["data"]["train_path"])
    val_data = load_math_dataset(cfg["data"]["val_path"])[: g["val_num_prompts"]]
    policy = start_policy(
        pcfg, cfg["cluster"]["num_workers"], cfg["cluster"]["gpus_per_worker"], init_reference_model=lcfg["kl_coef"] > 0
    )
    env = MathEnvironment(cfg["env"]["num_workers"])
    logger = Logger(cfg["logger"])
    ckpt = CheckpointManager(ckpt_cfg["checkpoint_dir"], ckpt_cfg["keep_top_k"])
    loss_fn = ClippedPGLoss(lcfg["ratio_clip_min"], lcfg["ratio_clip_max"], lcfg["kl_coef"])
    group = g["num_generations_per_prompt"]
    try:
        step = resume_from_latest(policy, ckpt, ckpt_cfg, logger, "grpo")
        if g["val_period"] > 0 and step == 0:
            logger.log(validate(policy, tokenizer, env, val_data, pcfg["generation"]), 0)
        it = skip(batches(train_data, g["num_prompts_per_step"], g["seed"], cfg["data"]["shuffle"]), step)
        metrics: dict[str, float] = {}
        first_step = step + 1
        while step < g["max_num_steps"]:
            step += 1
            t0 = time.perf_counter()
            problems = next(it)
            prompts, out = rollout(policy, tokenizer, problems, group, dict(pcfg["generation"], seed=g["seed"] + step))  # type: ignore[arg-type]
            t_gen = time.perf_counter() - t0
            rewards = torch.tensor(
                env.score(decode_responses(tokenizer, out), [p["answer"] for p in problems for _ in range(group)])
            )
            p_len = out["prompt_length"]
            batch = {
                "input_ids": out["output_ids"],
                "attention_mask": torch.cat([prompts["attention_mask"], out["response_mask"][:, p_len:].long()], dim=1),
                "token_mask": out["response_mask"],
                "generation_logprobs": out["logprobs"],
                "advantages": group_advantages(rewards, group, g["normalize_rewards"]),
            }
            if lcfg["kl_coef"] > 0:
                batch["reference_logprobs"] = policy.get_logprobs(batch, reference=True)
            t1 = time.perf_counter()
            result = policy.train(batch, loss_fn)
            metrics = {
                "train/loss": result["loss"],
                "train/reward": float(rewards.mean()),
                "train/accuracy": float((rewards >= 1.0).float().mean()),
                "train/kl": result.get("kl", 0.0),
                "train/clip_fraction": result.get("clip_fraction", 0.0),
                "train/grad_norm": result["grad_norm"],
                "train/mean_gen_tokens": float(out["response_mask"].sum(1).mean()),
                "timing/generation_s": t_gen,
                "timing/train_s": time.perf_counter() - t1,
                "timing/step_s": time.perf_counter() - t0,
            }
            if step == first_step:
                metrics.update(run_start_metrics(policy, step))
            if due(step, g["val_period"], g["max_num_steps"]):
                metrics.update(validate(policy, tokenizer, env, val_data, pcfg["generation"]))
            logger.log(metrics, step)
            save_if_due(policy, ckpt, ckpt_cfg, step, g["max_num_steps"], metrics)
        return metrics
    finally:
        logger.close()
        env.shutdown()
        policy.shutdown()


def default_config_path() -> Path:
    return Path(__file__).resolve().parents[2] / "examples" / "configs" / "grpo_math.yaml"
