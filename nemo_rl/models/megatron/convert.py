"""Hugging Face Llama/Qwen2 state dicts <-> megatron-core GPT state dicts (local layer spec).

Pure torch: no megatron import, so the mapping can be checked anywhere. Layouts that differ:

- attention: HF keeps q/k/v apart; megatron fuses them into `linear_qkv`, grouped per key/value
  head: for each of the `num_query_groups` groups, its query heads, then its key, then its value.
- MLP: megatron's `linear_fc1` is [gate; up] stacked on dim 0 (gated linear unit, gate first).

Tensor parallelism splits column-parallel weights (embedding, qkv, fc1, output layer) on dim 0
and row-parallel ones (attention output, fc2) on dim 1; norms are replicated.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

SUPPORTED_MODEL_TYPES = ("llama", "qwen2")


class ConversionError(ValueError):
    """A model this converter cannot map, with a one-line reason."""


@dataclass(frozen=True)
class ArchSpec:
    """What the conversion and the model builder need from a Hugging Face config."""

    model_type: str
    num_layers: int
    hidden_size: int
    num_attention_heads: int
    num_query_groups: int
    head_dim: int
    ffn_hidden_size: int
    vocab_size: int
    qkv_bias: bool
    tie_word_embeddings: bool
    rms_norm_eps: float
    rope_theta: float
    rope_llama3_factor: float | None  # Llama 3.1-style rope scaling factor, None when unscaled
    max_position_embeddings: int

    @property
    def heads_per_group(self) -> int:
        return self.num_attention_heads // self.num_query_groups


def _rope(cfg: Any) -> tuple[float, dict[str, Any]]:
    """(theta, scaling parameters) from transformers 5 `rope_parameters` or the older fields."""
    params = getattr(cfg, "rope_parameters", None)
    if isinstance(params, Mapping) and "rope_theta" in params:
        return float(params["rope_theta"]), dict(params)
    scaling = getattr(cfg, "rope_scaling", None) or {}
    return float(getattr(cfg, "rope_theta", 10000.0)), dict(scaling)


def arch_from_hf_config(cfg: Any) -> ArchSpec:
    """Read an HF `PretrainedConfig` (Llama or Qwen2); unsupported features raise ConversionError."""
    model_type = str(getattr(cfg, "model_type", ""))
    if model_type not in SUPPORTED_MODEL_TYPES:
        raise ConversionError(
            f"model_type {model_type!r} is not supported by the megatron path (supported: {', '.join(SUPPORTED_MODEL_TYPES)})"
        )
    heads = int(cfg.num_attention_heads)
    groups = int(getattr(cfg, "num_key_value_heads", None) or heads)
    head_dim = int(getattr(cfg, "head_dim", None) or cfg.hidden_size // heads)
    if heads % groups:
        raise ConversionError(f"num_attention_heads={heads} is not a multiple of num_key_value_heads={groups}")
    if model_type == "llama" and (getattr(cfg, "attention_bias", False) or getattr(cfg, "mlp_bias", False)):
        raise ConversionError("Llama configs with attention_bias or mlp_bias are not supported")
    if model_type == "qwen2" and getattr(cfg, "use_sliding_window", False):
        raise ConversionError("Qwen2 configs with use_sliding_window=true are not supported")
    theta, rope = _rope(cfg)
    rope_type = rope.get("rope_type", rope.get("type", "default")) or "default"
    factor: float | None = None
    if rope_type == "llama3":
        # megatron-core hard-codes low/high frequency factors 1 and 4 and an 8192 original context.
        expected = {"low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}
        for key, value in expected.items():
            if float(rope.get(key, value)) != float(value):
                raise ConversionError(
                    f"llama3 rope scaling with {key}={rope.get(key)} is not supported (megatron-core assumes {value})"
                )
        factor = float(rope["factor"])
    elif rope_type != "default":
        raise ConversionError(f"rope_type {rope_type!r} is not supported (supported: default, llama3)")
    return ArchSpec(
        model_type=model_type,
        num_layers=int(cfg.num_hidden_layers),
        hidden_size=int(cfg.hidden_size),
        num_attention_heads=heads,
        num_query_groups=groups,
        head_dim=head_dim,
        ffn_hidden_size=int(cfg.intermediate_size),
        vocab_size=int(cfg.vocab_size),
        qkv_bias=model_type == "qwen2",
        tie_word_embeddings=bool(getattr(cfg, "tie_word_embeddings", False)),
        rms_norm_eps=float(cfg.rms_norm_eps),
        rope_theta=theta,
        rope_llama3_factor=factor,
        max_position_embeddings=int(getattr(cfg, "max_position_embeddings", 4096)),
    )


def check_tensor_parallel(arch: ArchSpec, tp: int) -> None:
    """Raise ConversionError when the model cannot be split `tp` ways."""
    if tp < 1:
        raise ConversionError(f"tensor_model_parallel_size must be >= 1, got {tp}")
    for name, value in (
        ("num_key_value_heads", arch.num_query_groups),
        ("vocab_size", arch.vocab_size),
        ("intermediate_size", arch.ffn_hidden_size),
    ):
        if value % tp:
            raise ConversionError(f"{name}={value} is not divisible by tensor_model_parallel_size={tp}")


# ---- fused qkv ------------------------------------------------------------------------------
def _fuse_qkv(arch: ArchSpec, q: Tensor, k: Tensor, v: Tensor) -> Tensor:
    g, hd, per = arch.num_query_groups, arch.head_dim, arch.heads_per_group
    rest = q.shape[1:]
    parts = [q.reshape(g, per * hd, *rest), k.reshape(g, hd, *rest), v.reshape(g, hd, *rest)]
    return torch.cat(parts, dim=1).reshape(-1, *rest)


def _split_qkv(arch: ArchSpec, qkv: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    g, hd, per = arch.num_query_groups, arch.head_dim, arch.heads_per_group
    rest = qkv.shape[1:]
    q, k, v = qkv.reshape(g, (per + 2) * hd, *rest).split([per * hd, hd, hd], dim=1)
    return q.reshape(-1, *rest), k.reshape(-1, *rest), v.reshape(-1, *rest)


# ---- whole state dicts ----------------------------------------------------------------------
def hf_to_mcore(arch: ArchSpec, hf: Mapping[str, Tensor]) -> dict[str, Tensor]:
    """HF `model.state_dict()` (or safetensors) -> megatron GPTModel state dict (TP = 1)."""
    out: dict[str, Tensor] = {"embedding.word_embeddings.weight": hf["model.embed_tokens.weight"]}
    for i in range(arch.num_layers):
        h, m = f"model.layers.{i}.", f"decoder.layers.{i}."
        out[m + "input_layernorm.weight"] = hf[h + "input_layernorm.weight"]
        out[m + "self_attention.linear_qkv.weight"] = _fuse_qkv(
            arch,
            hf[h + "self_attn.q_proj.weight"],
            hf[h + "self_attn.k_proj.weight"],
            hf[h + "self_attn.v_proj.weight"],
        )
        if arch.qkv_bias:
            out[m + "self_attention.linear_qkv.bias"] = _fuse_qkv(
                arch, hf[h + "self_attn.q_proj.bias"], hf[h + "self_attn.k_proj.bias"], hf[h + "self_attn.v_proj.bias"]
            )
        out[m + "self_attention.linear_proj.weight"] = hf[h + "self_attn.o_proj.weight"]
        out[m + "pre_mlp_layernorm.weight"] = hf[h + "post_attention_layernorm.weight"]
        out[m + "mlp.linear_fc1.weight"] = torch.cat([hf[h + "mlp.gate_proj.weight"], hf[h + "mlp.up_proj.weight"]], 0)
        out[m + "mlp.linear_fc2.weight"] = hf[h + "mlp.down_proj.weight"]
    out["decoder.final_layernorm.weight"] = hf["model.norm.weight"]
    if not arch.tie_word_embeddings:
        out["output_layer.weight"] = hf["lm_head.weight"]
    return out


def mcore_to_hf(arch: ArchSpec, mc: Mapping[str, Tensor]) -> dict[str, Tensor]:
    """Megatron GPTModel state dict (TP = 1) -> HF state dict (no `lm_head` when embeddings are tied)."""
    out: dict[str, Tensor] = {"model.embed_tokens.weight": mc["embedding.word_embeddings.weight"]}
    for i in range(arch.num_layers):
        h, m = f"model.layers.{i}.", f"decoder.layers.{i}."
        out[h + "input_layernorm.weight"] = mc[m + "input_layernorm.weight"]
        q, k, v = _split_qkv(arch, mc[m + "self_attention.linear_qkv.weight"])
        out[h + "self_attn.q_proj.weight"], out[h + "self_attn.k_proj.weight"], out[h + "self_attn.v_proj.weight"] = (
            q,
            k,
            v,
        )
        if arch.qkv_bias:
            q, k, v = _split_qkv(arch, mc[m + "self_attention.linear_qkv.bias"])
            out[h + "self_attn.q_proj.bias"], out[h + "self_attn.k_proj.bias"], out[h + "self_attn.v_proj.bias"] = (
                q,
                k,
                v,
            )
        out[h + "self_attn.o_proj.weight"] = mc[m + "self_attention.linear_proj.weight"]
        out[h + "post_attention_layernorm.weight"] = mc[m + "pre_mlp_layernorm.weight"]
        gate, up = mc[m + "mlp.linear_fc1.weight"].chunk(2, dim=0)
        out[h + "mlp.gate_proj.weight"], out[h + "mlp.up_proj.weight"] = gate, up
        out[h + "mlp.down_proj.weight"] = mc[m + "mlp.linear_fc2.weight"]
    out["model.norm.weight"] = mc["decoder.final_layernorm.weight"]
    if not arch.tie_word_embeddings:
        out["lm_head.weight"] = mc["output_layer.weight"]
    return {k: v.contiguous() for k, v in out.items()}


# ---- tensor parallelism ---------------------------------------------------------------------
def _split_dim(name: str) -> int | None:
    """Dim along which a megatron weight is split across TP ranks; None = replicated."""
    if name.endswith(("linear_proj.weight", "linear_fc2.weight")):
        return 1
    if name.endswith(
        ("word_embeddings.weight", "linear_qkv.weight", "linear_qkv.bias", "linear_fc1.weight", "output_layer.weight")
    ):
        return 0
    return None


def shard_for_rank(full: Mapping[str, Tensor], tp_rank: int, tp_size: int) -> dict[str, Tensor]:
    """One TP rank's slice of a full (TP = 1) megatron state dict (or of any param-shaped dict)."""
    out: dict[str, Tensor] = {}
    for name, t in full.items():
        dim = _split_dim(name)
        if dim is None or tp_size == 1:
            out[name] = t
        elif name.endswith("linear_fc1.weight"):
            # [gate; up]: each rank holds its slice of gate stacked on its slice of up.
            gate, up = t.chunk(2, dim=0)
            out[name] = torch.cat([gate.chunk(tp_size, 0)[tp_rank], up.chunk(tp_size, 0)[tp_rank]], 0).contiguous()
        else:
            out[name] = t.chunk(tp_size, dim)[tp_rank].contiguous()
    return out


def unshard(shards: Sequence[Mapping[str, Tensor]]) -> dict[str, Tensor]:
    """Inverse of `shard_for_rank`: the TP ranks' dicts (in rank order) -> the full dict."""
    out: dict[str, Tensor] = {}
    for name in shards[0]:
        parts = [s[name] for s in shards]
        dim = _split_dim(name)
        if dim is None or len(parts) == 1:
            out[name] = parts[0]
        elif name.endswith("linear_fc1.weight"):
            gates, ups = zip(*(p.chunk(2, dim=0) for p in parts), strict=True)
            out[name] = torch.cat([*gates, *ups], 0)
        else:
            out[name] = torch.cat(parts, dim)
    return out


def is_tensor_parallel_split(name: str) -> bool:
    """Whether the named megatron parameter is split across TP ranks (else replicated)."""
    return _split_dim(name) is not None
