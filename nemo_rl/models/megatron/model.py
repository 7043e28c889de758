"""Build a megatron-core GPT model matching a Hugging Face Llama/Qwen2 config (local layer spec).

The local spec uses only megatron-core's own modules (ColumnParallelLinear, DotProductAttention,
torch RMSNorm), so no Transformer Engine or Apex is needed. Fused kernels are switched off: they
are CUDA-only or need Apex, and the unfused path is what matches Hugging Face numerically.
Parameters are float32 (mixed precision comes from autocast in the worker).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from nemo_rl.models.megatron.convert import ArchSpec, check_tensor_parallel


def transformer_config(arch: ArchSpec, tp: int) -> Any:
    """The megatron `TransformerConfig` for `arch` split `tp` ways."""
    from megatron.core.transformer.transformer_config import TransformerConfig

    check_tensor_parallel(arch, tp)
    return TransformerConfig(
        num_layers=arch.num_layers,
        hidden_size=arch.hidden_size,
        num_attention_heads=arch.num_attention_heads,
        num_query_groups=arch.num_query_groups,
        kv_channels=arch.head_dim,
        ffn_hidden_size=arch.ffn_hidden_size,
        normalization="RMSNorm",
        layernorm_epsilon=arch.rms_norm_eps,
        add_bias_linear=False,
        add_qkv_bias=arch.qkv_bias,
        gated_linear_unit=True,
        activation_func=torch.nn.functional.silu,
        hidden_dropout=0.0,
        attention_dropout=0.0,
        tensor_model_parallel_size=tp,
        params_dtype=torch.float32,
        # Weights come from the HF checkpoint: allocate on CPU, skip random init.
        use_cpu_initialization=True,
        perform_initialization=False,
        bias_activation_fusion=False,
        bias_dropout_fusion=False,
        masked_softmax_fusion=False,
        persist_layer_norm=False,
        apply_rope_fusion=False,
        gradient_accumulation_fusion=False,
        attention_softmax_in_fp32=True,
    )


def build_gpt_model(arch: ArchSpec, tp: int) -> Any:
    """A megatron `GPTModel` on CPU (this rank's TP shard); model-parallel state must be initialised."""
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
    from megatron.core.models.gpt.gpt_model import GPTModel

    return GPTModel(
        config=transformer_config(arch, tp),
        transformer_layer_spec=get_gpt_layer_local_spec(normalization="RMSNorm"),
        vocab_size=arch.vocab_size,
        max_sequence_length=arch.max_position_embeddings,
        parallel_output=False,  # gather the vocabulary: callers get full logits on every TP rank
        share_embeddings_and_output_weights=arch.tie_word_embeddings,
        position_embedding_type="rope",
        rotary_base=int(arch.rope_theta),
        rope_scaling=arch.rope_llama3_factor is not None,
        rope_scaling_factor=arch.rope_llama3_factor or 8.0,
    )


def load_weights(model: Any, weights: dict[str, Tensor]) -> None:
    """Copy a (rank-local) megatron state dict into `model`; every parameter must be covered."""
    own = {k for k in model.state_dict() if not k.endswith("_extra_state")}
    missing, unexpected = own - weights.keys(), weights.keys() - own
    if missing or unexpected:
        raise ValueError(
            f"megatron weights do not match the model: missing {sorted(missing)[:3]}, "
            f"unexpected {sorted(unexpected)[:3]}"
        )
    model.load_state_dict(weights, strict=False)


def model_weights(model: Any) -> dict[str, Tensor]:
    """The model's parameters by state-dict name (no `_extra_state`), detached."""
    return {k: v.detach() for k, v in model.state_dict().items() if not k.endswith("_extra_state") and v is not None}


def attention_mask(attn: Tensor) -> Tensor:
    """[B, 1, T, T] boolean mask, True = blocked: causal, and padded keys (left or right) blocked.

    Passed explicitly so megatron never builds its default causal mask (which is made on CUDA).
    A fully padded query row keeps its own diagonal so its softmax stays finite.
    """
    t = attn.shape[1]
    causal = torch.ones(t, t, dtype=torch.bool, device=attn.device).triu(1)
    blocked = causal[None] | ~attn.bool()[:, None, :]
    eye = torch.eye(t, dtype=torch.bool, device=attn.device)[None]
    return (blocked & ~eye)[:, None]


def forward_logits(model: Any, input_ids: Tensor, attn: Tensor) -> Tensor:
    """[B, T, V] logits; positions come from the mask so left-padded rows score as unpadded."""
    positions = (attn.long().cumsum(-1) - 1).clamp(min=0)
    out: Tensor = model(input_ids, positions, attention_mask(attn))
    return out
