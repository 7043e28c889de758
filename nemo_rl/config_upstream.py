"""Upstream NeMo RL's config keys that its functional scripts pass, and what each means here.

Upstream's `tests/functional/sft.sh` and `grpo.sh` pass overrides in upstream's schema. The
ones that this library's schema lacks are defined in examples/configs/*.yaml (the YAML is the
schema, see config.py) with a default that changes nothing, and `resolve_upstream_keys` gives
them their meaning here, or refuses a value that has none with one line saying what to write:

    cluster.gpus_per_node   upstream: GPUs per node; the policy runs as one worker per GPU,
    cluster.num_nodes       gpus_per_node x num_nodes of them. Here the same worker count: when
                            either is set (not null), cluster.num_workers becomes
                            gpus_per_node x num_nodes (a null one counts as 1). Each worker takes
                            a GPU when the Ray cluster has one for every worker
                            (cluster.gpus_per_worker: auto), else it runs on CPU (gloo): on a
                            machine without GPUs, gpus_per_node=2 is two CPU workers, the same
                            data-parallel split of each batch. Ray places the workers (PACK); a
                            per-node count is not enforced. cluster.num_workers, when also set
                            (not its default 1), must equal that product.
    logger.wandb_enabled    false: nothing to switch off (no Weights & Biases here). true:
                            refused; the metrics go to TensorBoard under logger.log_dir.
    policy.megatron_recipe  upstream: the import path of a Megatron-Bridge recipe, read only by
                            the Megatron backend. Here too it is unused while
                            policy.megatron_cfg.enabled=false (the default, as upstream's); with
                            the Megatron backend it is refused: there is no Megatron-Bridge, the
                            model comes from policy.model_name and policy.megatron_cfg.

policy.tokenizer.name (upstream: the tokenizer's folder or Hugging Face name, which 11 of its
functional scripts pass) is a key of this library too, read where the tokenizer is loaded
(driver and workers; null: policy.model_name's own), so both `policy.tokenizer.name=X` and
`+policy.tokenizer.name=X` take effect; config_checks checks it.

The other keys of upstream's scripts have the same name and meaning in both schemas:
sft.max_num_steps, sft.val_period, sft.val_batches (batches per validation),
grpo.num_prompts_per_step, grpo.num_generations_per_prompt, grpo.max_num_steps,
policy.train_global_batch_size, policy.train_micro_batch_size, logger.log_dir,
logger.tensorboard_enabled, logger.monitor_gpus (GPU memory and utilisation as gpu/* metrics;
none on a machine without GPUs), checkpointing.enabled, .save_period, .checkpoint_dir.

A config without these keys (an older YAML passed with --config) is left as it is.
"""

from __future__ import annotations

from collections.abc import Mapping, MutableMapping
from typing import Any

from nemo_rl.config import MISSING, Check, Relation, Rule, integer, lookup, null, show, text, validate

WANDB_REFUSAL = (
    "must be false: there is no Weights & Biases here, the metrics go to TensorBoard under "
    "logger.log_dir (logger.tensorboard_enabled=true); write logger.wandb_enabled=false or drop it"
)
MEGATRON_RECIPE_REFUSAL = (
    "policy.megatron_recipe ({0}) names a Megatron-Bridge recipe, and there is no Megatron-Bridge here: "
    "the Megatron backend (policy.megatron_cfg.enabled=true) builds its model from policy.model_name "
    "and policy.megatron_cfg; write policy.megatron_recipe=null"
)


def wandb_switch() -> Check:
    """logger.wandb_enabled: false only (see WANDB_REFUSAL)."""

    def check(value: Any) -> str | None:
        if value is False:
            return None
        if value is True:
            return WANDB_REFUSAL
        return f"must be true or false, got {show(value)}"

    return check


def _workers(gpus_per_node: int | None, num_nodes: int | None) -> int:
    return (gpus_per_node or 1) * (num_nodes or 1)


UPSTREAM_RULES: tuple[Rule | Relation, ...] = (
    Rule("cluster.gpus_per_node", null() | integer(ge=1)),
    Rule("cluster.num_nodes", null() | integer(ge=1)),
    Rule("logger.wandb_enabled", wandb_switch()),
    Rule("policy.megatron_recipe", null() | text()),
    Relation(
        ("policy.megatron_recipe", "policy.megatron_cfg.enabled"),
        lambda recipe, megatron: recipe is None or megatron is not True,
        MEGATRON_RECIPE_REFUSAL,
    ),
    Relation(
        ("cluster.num_workers", "cluster.gpus_per_node", "cluster.num_nodes"),
        lambda n, g, nodes: (g is None and nodes is None) or n in (1, _workers(g, nodes)),
        "cluster.num_workers ({0}) disagrees with cluster.gpus_per_node x cluster.num_nodes ({1} x {2}): "
        "set one of them (upstream's gpus_per_node x num_nodes is the number of policy workers)",
    ),
)


def _present(cfg: Mapping[str, Any], rule: Rule | Relation) -> bool:
    keys = (rule.key,) if isinstance(rule, Rule) else rule.keys
    return all(lookup(cfg, key) is not MISSING for key in keys)


def resolve_upstream_keys(cfg: MutableMapping[str, Any]) -> list[str]:
    """Check upstream's keys (those the config defines) and apply the accepted ones in place:
    cluster.gpus_per_node x cluster.num_nodes -> cluster.num_workers. Returns the problems,
    one line each (nothing is changed when there is one)."""
    problems = validate(cfg, [rule for rule in UPSTREAM_RULES if _present(cfg, rule)])
    if problems:
        return problems
    gpus_per_node = lookup(cfg, "cluster.gpus_per_node")
    num_nodes = lookup(cfg, "cluster.num_nodes")
    given = [v for v in (gpus_per_node, num_nodes) if v is not MISSING and v is not None]
    if given and isinstance(cfg.get("cluster"), MutableMapping):
        cfg["cluster"]["num_workers"] = _workers(
            None if gpus_per_node is MISSING else gpus_per_node, None if num_nodes is MISSING else num_nodes
        )
    return []
