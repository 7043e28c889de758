"""Evaluation: score a model and the checkpoints a training run saved, without training.

Each model scored is logged at a step: `policy.model_name` itself at step 0 (eval.base_model),
then every complete checkpoint `step_N` under eval.checkpoint_dir at step N, so the scores of
a run's checkpoints line up with its training curve in TensorBoard. Per model:

    eval/loss        mean negative log-likelihood per assistant token of the chat records in
                     data.val_path (every full batch of eval.loss_batch_size; the same number
                     as SFT's val/loss over the same records)
    eval/accuracy    greedy accuracy on the first eval.num_prompts problems of data.math_path,
                     scored by the math environment (as GRPO's val/accuracy)

One policy is started (from `policy.model_name`); each checkpoint is then loaded into it with
`Policy.load_checkpoint`, so the model must be the one the run started from and the backend
the one that wrote the checkpoint.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, TypedDict

from nemo_rl.algorithms.grpo import EnvConfig
from nemo_rl.algorithms.grpo import validate as math_accuracy
from nemo_rl.algorithms.utils import ClusterConfig, mean_nll, resolve_sources
from nemo_rl.data.datasets import MathProblem, Message, load_chat_dataset, load_math_dataset
from nemo_rl.distributed.ray_cluster import init_ray
from nemo_rl.environments.math_environment import MathEnvironment
from nemo_rl.models.generation.interfaces import GenerationConfig
from nemo_rl.models.policy.interfaces import PolicyConfig, tokenizer_source
from nemo_rl.models.policy.policy import Policy, start_policy
from nemo_rl.utils.checkpoint import CheckpointManager
from nemo_rl.utils.logger import Logger, LoggerConfig


class EvalConfig(TypedDict):
    checkpoint_dir: str | None
    base_model: bool
    loss_batch_size: int
    num_prompts: int
    max_new_tokens: int


class EvalDataConfig(TypedDict):
    val_path: str | None
    math_path: str | None


class EvalMasterConfig(TypedDict):
    eval: EvalConfig
    policy: PolicyConfig
    data: EvalDataConfig
    env: EnvConfig
    cluster: ClusterConfig
    logger: LoggerConfig


def models_to_score(checkpoint_dir: str | None, base_model: bool) -> list[tuple[int, Path | None]]:
    """(step, checkpoint's policy folder) in step order; the base model is (0, None)."""
    out: list[tuple[int, Path | None]] = [(0, None)] if base_model else []
    if checkpoint_dir:
        ckpt = CheckpointManager(checkpoint_dir)
        out += [(step, ckpt.step_dir(step) / "policy") for step in ckpt.complete_steps()]
    return out


def score(
    policy: Policy,
    tokenizer: Any,
    cfg: EvalMasterConfig,
    conversations: Sequence[Sequence[Message]],
    problems: Sequence[MathProblem],
    env: MathEnvironment | None,
) -> dict[str, float]:
    """eval/loss (when there are conversations) and eval/accuracy (when there are problems)."""
    e = cfg["eval"]
    metrics: dict[str, float] = {}
    if conversations:
        n = len(conversations) // e["loss_batch_size"]
        metrics["eval/loss"] = mean_nll(
            policy, tokenizer, conversations, e["loss_batch_size"], n, cfg["policy"]["max_total_sequence_length"]
        )
    if problems and env is not None:
        greedy = GenerationConfig(max_new_tokens=e["max_new_tokens"], temperature=0.0, top_p=1.0, seed=0)
        metrics["eval/accuracy"] = math_accuracy(policy, tokenizer, env, problems, greedy)["val/accuracy"]
    return metrics


def run_eval(cfg: EvalMasterConfig) -> dict[str, float]:
    """Score every model `models_to_score` names; return the last one's metrics."""
    from transformers import AutoTokenizer

    e, pcfg, data = cfg["eval"], cfg["policy"], cfg["data"]
    todo = models_to_score(e["checkpoint_dir"], e["base_model"])
    if not todo:
        raise ValueError(f"nothing to evaluate: no complete checkpoint under {e['checkpoint_dir']}")
    init_ray()
    resolve_sources(pcfg)
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_source(pcfg))
    conversations = load_chat_dataset(data["val_path"]) if data["val_path"] else []
    problems = load_math_dataset(data["math_path"])[: e["num_prompts"]] if data["math_path"] else []
    policy = start_policy(pcfg, cfg["cluster"]["num_workers"], cfg["cluster"]["gpus_per_worker"])
    env = MathEnvironment(cfg["env"]["num_workers"]) if problems else None
    logger = Logger(cfg["logger"])
    try:
        metrics: dict[str, float] = {}
        for step, path in todo:
            if path is not None:
                policy.load_checkpoint(str(path))
            logger.console.print(f"[eval] step {step}: {path or pcfg['model_name']}", markup=False)
            metrics = score(policy, tokenizer, cfg, conversations, problems, env)
            logger.log(metrics, step)
        return metrics
    finally:
        logger.close()
        if env is not None:
            env.shutdown()
        policy.shutdown()


def default_config_path() -> Path:
    return Path(__file__).resolve().parents[2] / "examples" / "configs" / "eval.yaml"
