"""The config rules of SFT, GRPO and evaluation, checked by the entry points before Ray or
torch start.

Tables of `Rule`s and `Relation`s (see `nemo_rl.config.validate`) over the plain config
dictionaries that `sft.SFTMasterConfig`, `grpo.GRPOMasterConfig` and `eval.EvalMasterConfig`
describe. Besides the values themselves they only read the file system: paths exist, a model
folder holds a config and a tokenizer, a data file has enough records for a batch. This module
imports neither torch nor Ray (sft.py, grpo.py and eval.py do), so a bad value is refused in
about a second.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from functools import lru_cache
from pathlib import Path
from typing import Any

from nemo_rl.config import (
    MISSING,
    Check,
    Relation,
    Rule,
    boolean,
    choice,
    directory_path,
    existing_file,
    integer,
    lookup,
    number,
    pair,
    show,
    text,
    validate,
)
from nemo_rl.utils.checkpoint import CheckpointManager

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json")
# huggingface_hub's repo id rule: "name" or "namespace/name" of word characters, '-' and '.',
# each part starting and ending with a word character.
_HUB_ID = re.compile(r"^(?:\w(?:[\w\-.]*\w)?/)?\w(?:[\w\-.]*\w)?$")


def looks_like_hub_id(name: str) -> bool:
    """Could `name` be a Hugging Face Hub repo id (as opposed to a local path)?"""
    if not _HUB_ID.match(name) or "--" in name or ".." in name or len(name) > 96:
        return False
    parent = Path(name).parent
    return parent == Path(".") or not parent.exists()  # "results/x" with results/ here is a path


def _hub_offline() -> bool:
    from huggingface_hub import constants

    return bool(constants.HF_HUB_OFFLINE)


def _in_hub_cache(repo_id: str, filename: str = "config.json") -> bool:
    from huggingface_hub import try_to_load_from_cache

    return isinstance(try_to_load_from_cache(repo_id, filename), str)


def model_source() -> Check:
    """A local Hugging Face model folder (config.json and a tokenizer), or a Hub repo id."""

    def check(value: Any) -> str | None:
        if not text().ok(value):
            return f"must be a model folder or a Hugging Face Hub id, got {show(value)}"
        p = Path(value).expanduser()
        if p.is_dir():
            if not (p / "config.json").is_file():
                return f"is not a Hugging Face model folder (no config.json): {value}"
            if not any((p / f).is_file() for f in TOKENIZER_FILES):
                return f"has no tokenizer ({' / '.join(TOKENIZER_FILES[:2])}): {value}"
            return None
        if p.exists():
            return f"must be a model folder, not a file: {value}"
        if looks_like_hub_id(value):
            if _hub_offline() and not _in_hub_cache(value):
                return f"is neither a local folder nor in the Hugging Face cache (HF_HUB_OFFLINE is set): {value}"
            return None  # resolved (cache or download) by transformers
        return f"does not exist: {value} (a local model folder, or a Hugging Face Hub id such as org/name)"

    return check


def tokenizer_source() -> Check:
    """policy.tokenizer.name: null (the tokenizer of policy.model_name), a local folder holding a
    tokenizer, or a Hub repo id."""

    def check(value: Any) -> str | None:
        if value is None:
            return None
        if not text().ok(value):
            return f"must be null, a tokenizer folder or a Hugging Face Hub id, got {show(value)}"
        p = Path(value).expanduser()
        if p.is_dir():
            if not any((p / f).is_file() for f in TOKENIZER_FILES):
                return f"has no tokenizer ({' / '.join(TOKENIZER_FILES[:2])}): {value}"
            return None
        if p.exists():
            return f"must be a tokenizer folder, not a file: {value}"
        if looks_like_hub_id(value):
            if _hub_offline() and not _in_hub_cache(value, "tokenizer_config.json"):
                return f"is neither a local folder nor in the Hugging Face cache (HF_HUB_OFFLINE is set): {value}"
            return None
        return f"does not exist: {value} (a local tokenizer folder, or a Hugging Face Hub id such as org/name)"

    return check


def find_sft_export(path: str | Path) -> Path | None:
    """The Hugging Face export of an SFT checkpoint dir (its newest step) or of one step; else None."""
    p = Path(path)
    if (p / "policy" / "hf").is_dir():
        return (p / "policy" / "hf").resolve()
    latest = CheckpointManager(p).latest()
    if latest is not None and (latest / "policy" / "hf").is_dir():
        return (latest / "policy" / "hf").resolve()
    return None


def sft_checkpoint() -> Check:
    """null, or an SFT checkpoint dir with a Hugging Face export (see find_sft_export)."""

    def check(value: Any) -> str | None:
        if value is None:
            return None
        if not text().ok(value):
            return f"must be null or an SFT checkpoint directory, got {show(value)}"
        if not Path(value).is_dir():
            return f"does not exist: {value}"
        if find_sft_export(value) is None:
            return f"holds no SFT checkpoint with a policy/hf/ export: {value}"
        return None

    return check


def run_checkpoints() -> Check:
    """null, or a training run's checkpoint dir holding at least one complete step."""

    def check(value: Any) -> str | None:
        if value is None:
            return None
        if not text().ok(value):
            return f"must be null or a checkpoint directory, got {show(value)}"
        if not Path(value).is_dir():
            return f"does not exist: {value}"
        if not CheckpointManager(value).complete_steps():
            return f"holds no complete checkpoint (step_N/ with training_state.json): {value}"
        return None

    return check


def optional_file() -> Check:
    """null, or a path to an existing file."""
    exists = existing_file()
    return lambda value: None if value is None else exists(value)


@lru_cache(maxsize=32)
def _records(path: str, mtime_ns: int) -> int:
    with open(path, "rb") as f:
        return sum(1 for line in f if line.strip())


def count_records(path: str) -> int:
    """Non-empty lines of a JSONL file (its records)."""
    return _records(str(Path(path).resolve()), Path(path).stat().st_mtime_ns)


def _fits(batch: int, path: str) -> bool:
    return batch <= count_records(path)


_POLICY: tuple[Rule | Relation, ...] = (
    Rule("policy.model_name", model_source()),
    Rule("policy.tokenizer.name", tokenizer_source()),
    Rule("policy.precision", choice("auto", "float32", "bfloat16", "float16")),
    Rule("policy.train_global_batch_size", integer(ge=1)),
    Rule("policy.train_micro_batch_size", integer(ge=1)),
    Rule("policy.logprob_micro_batch_size", integer(ge=1)),
    Rule("policy.max_total_sequence_length", integer(ge=2)),
    Rule("policy.max_grad_norm", number(gt=0)),
    # lr=0 is allowed: the functional tests' documented negative control (the run must end in FAIL).
    Rule("policy.optimizer.lr", number(ge=0)),
    Rule("policy.optimizer.weight_decay", number(ge=0)),
    Rule("policy.optimizer.betas", pair(number(ge=0, lt=1))),
    Rule("policy.scheduler.warmup_steps", integer(ge=0)),
    Rule("policy.megatron_cfg.enabled", boolean()),
    Rule("policy.megatron_cfg.tensor_model_parallel_size", integer(ge=1)),
    Rule("cluster.num_workers", integer(ge=1)),
    Rule("cluster.gpus_per_worker", choice("auto") | number(ge=0)),
    Relation(
        ("policy.megatron_cfg.enabled", "cluster.num_workers", "policy.megatron_cfg.tensor_model_parallel_size"),
        lambda on, n, tp: not on or n % tp == 0,
        "cluster.num_workers ({1}) must be a multiple of policy.megatron_cfg.tensor_model_parallel_size ({2})",
    ),
)

_LOGGER: tuple[Rule | Relation, ...] = (
    Rule("logger.log_dir", directory_path()),
    Rule("logger.tensorboard_enabled", boolean()),
    Rule("logger.monitor_gpus", boolean()),
    Rule("logger.gpu_monitor_interval_s", number(gt=0)),
)

_OUTPUTS: tuple[Rule | Relation, ...] = (
    Rule("checkpointing.enabled", boolean()),
    Rule("checkpointing.checkpoint_dir", directory_path()),
    Rule("checkpointing.save_period", integer(ge=0)),
    Rule("checkpointing.keep_top_k", integer(ge=0)),
    *_LOGGER,
)

SFT_RULES: tuple[Rule | Relation, ...] = (
    Rule("sft.max_num_steps", integer(ge=1)),
    Rule("sft.val_period", integer(ge=0)),
    Rule("sft.val_batches", integer(ge=1)),
    Rule("sft.val_global_batch_size", integer(ge=1)),
    Rule("sft.seed", integer()),
    *_POLICY,
    Rule("data.train_path", existing_file()),
    Rule("data.val_path", existing_file()),
    Rule("data.shuffle", boolean()),
    *_OUTPUTS,
    Relation(
        ("policy.train_global_batch_size", "cluster.num_workers"),
        lambda b, n: b % n == 0,
        "policy.train_global_batch_size ({0}) must be a multiple of cluster.num_workers ({1})",
    ),
    Relation(
        ("sft.val_global_batch_size", "cluster.num_workers"),
        lambda b, n: b % n == 0,
        "sft.val_global_batch_size ({0}) must be a multiple of cluster.num_workers ({1})",
    ),
    Relation(
        ("policy.train_global_batch_size", "data.train_path"),
        _fits,
        "policy.train_global_batch_size ({0}) exceeds the number of records in data.train_path {1}",
    ),
    Relation(
        ("sft.val_global_batch_size", "data.val_path", "sft.val_period"),
        lambda b, p, period: period == 0 or _fits(b, p),
        "sft.val_global_batch_size ({0}) exceeds the number of records in data.val_path {1}",
    ),
)

GRPO_RULES: tuple[Rule | Relation, ...] = (
    Rule("grpo.max_num_steps", integer(ge=1)),
    Rule("grpo.num_prompts_per_step", integer(ge=1)),
    Rule("grpo.num_generations_per_prompt", integer(ge=1)),
    Rule("grpo.normalize_rewards", boolean()),
    Rule("grpo.val_period", integer(ge=0)),
    Rule("grpo.val_num_prompts", integer(ge=1)),
    Rule("grpo.seed", integer()),
    Rule("loss_fn.ratio_clip_min", number(ge=0)),
    Rule("loss_fn.ratio_clip_max", number(ge=0)),
    Rule("loss_fn.kl_coef", number(ge=0)),
    *_POLICY,
    Rule("policy.init_from_sft", sft_checkpoint()),
    Rule("policy.generation.max_new_tokens", integer(ge=1)),
    Rule("policy.generation.temperature", number(ge=0)),
    Rule("policy.generation.top_p", number(gt=0, le=1)),
    Rule("policy.generation.seed", integer()),
    Rule("data.train_path", existing_file()),
    Rule("data.val_path", existing_file()),
    Rule("data.shuffle", boolean()),
    Rule("env.num_workers", integer(ge=1)),
    *_OUTPUTS,
    Relation(
        ("grpo.num_prompts_per_step", "grpo.num_generations_per_prompt", "cluster.num_workers"),
        lambda p, g, n: (p * g) % n == 0,
        "grpo.num_prompts_per_step x grpo.num_generations_per_prompt ({0} x {1}) "
        "must be a multiple of cluster.num_workers ({2})",
    ),
    Relation(
        ("grpo.num_generations_per_prompt", "grpo.normalize_rewards"),
        lambda g, norm: g >= 2 or not norm,
        "grpo.num_generations_per_prompt ({0}) must be >= 2 with grpo.normalize_rewards=true "
        "(a group of one has no spread)",
    ),
    Relation(
        ("grpo.val_num_prompts", "cluster.num_workers", "grpo.val_period"),
        lambda v, n, period: period == 0 or v >= n,
        "grpo.val_num_prompts ({0}) must be >= cluster.num_workers ({1}) when grpo.val_period > 0",
    ),
    Relation(
        ("grpo.num_prompts_per_step", "data.train_path"),
        _fits,
        "grpo.num_prompts_per_step ({0}) exceeds the number of records in data.train_path {1}",
    ),
)


EVAL_RULES: tuple[Rule | Relation, ...] = (
    Rule("eval.checkpoint_dir", run_checkpoints()),
    Rule("eval.base_model", boolean()),
    Rule("eval.loss_batch_size", integer(ge=1)),
    Rule("eval.num_prompts", integer(ge=0)),
    Rule("eval.max_new_tokens", integer(ge=1)),
    *_POLICY,
    Rule("data.val_path", optional_file()),
    Rule("data.math_path", optional_file()),
    Rule("env.num_workers", integer(ge=1)),
    *_LOGGER,
    Relation(
        ("eval.base_model", "eval.checkpoint_dir"),
        lambda base, ckpt: base or ckpt is not None,
        "eval.base_model is {0} and eval.checkpoint_dir is {1}: nothing to evaluate",
    ),
    Relation(
        ("data.val_path", "data.math_path", "eval.num_prompts"),
        lambda val, math, n: val is not None or (math is not None and n > 0),
        "data.val_path is {0}, and data.math_path is {1} with eval.num_prompts {2}: nothing to measure",
    ),
    Relation(
        ("eval.loss_batch_size", "cluster.num_workers"),
        lambda b, n: b % n == 0,
        "eval.loss_batch_size ({0}) must be a multiple of cluster.num_workers ({1})",
    ),
    Relation(
        ("eval.loss_batch_size", "data.val_path"),
        lambda b, p: p is None or _fits(b, p),
        "eval.loss_batch_size ({0}) exceeds the number of records in data.val_path {1}",
    ),
    Relation(
        ("eval.num_prompts", "cluster.num_workers", "data.math_path"),
        lambda v, n, p: p is None or v == 0 or v >= n,
        "eval.num_prompts ({0}) must be 0 or >= cluster.num_workers ({1})",
    ),
    Relation(
        ("policy.megatron_cfg.enabled", "eval.num_prompts", "data.math_path"),
        lambda on, n, p: not on or n == 0 or p is None,
        "eval.num_prompts ({1}) needs generation, which the Megatron policy worker "
        "(policy.megatron_cfg.enabled={0}) does not have: set eval.num_prompts=0",
    ),
)


# Keys a config written before them (an older YAML passed with --config) may lack: checked
# only where present, and their absence means their default.
OPTIONAL_KEYS = frozenset({"policy.tokenizer.name"})


def _check(cfg: Mapping[str, Any], rules: tuple[Rule | Relation, ...]) -> list[str]:
    absent = {key for key in OPTIONAL_KEYS if lookup(cfg, key) is MISSING}
    return validate(cfg, [r for r in rules if not (isinstance(r, Rule) and r.key in absent)])


def validate_sft(cfg: Mapping[str, Any]) -> list[str]:
    """Every problem of an SFT config (see examples/configs/sft.yaml), one line each."""
    return _check(cfg, SFT_RULES)


def validate_grpo(cfg: Mapping[str, Any]) -> list[str]:
    """Every problem of a GRPO config (see examples/configs/grpo_math.yaml), one line each."""
    return _check(cfg, GRPO_RULES)


def validate_eval(cfg: Mapping[str, Any]) -> list[str]:
    """Every problem of an evaluation config (see examples/configs/eval.yaml), one line each."""
    return _check(cfg, EVAL_RULES)
