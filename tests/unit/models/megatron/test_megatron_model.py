"""The megatron-core GPT model built from an HF config, with converted weights, against HF itself.

Runs in the pytest process at world size 1 (gloo + the CPU shim without a GPU, nccl on GPU 0).
"""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForCausalLM

from nemo_rl.models.megatron import convert
from nemo_rl.models.megatron.model import (
    build_gpt_model,
    forward_logits,
    load_weights,
    model_weights,
)
from tests.unit.models.megatron.conftest import device

# megatron_single_rank runs CUDA in the test process: uses_cuda keeps Ray actors off the GPUs meanwhile (-n).
pytestmark = [pytest.mark.mcore, pytest.mark.uses_cuda, pytest.mark.filterwarnings("ignore::UserWarning")]

# float32 on both sides; the two implementations differ only in the order of floating-point
# operations (fused qkv matmul, RMSNorm kernel), so logits agree to ~1e-6 on the tiny models.
LOGITS_ATOL = 1e-4
LLAMA_1B = "meta-llama/Llama-3.2-1B"


def compare(hf_path: str, input_ids: torch.Tensor, attn: torch.Tensor) -> tuple[float, float]:
    """(max |logit diff| over unpadded positions, max |logit|) of HF vs the converted mcore model."""
    dev = device()
    hf = AutoModelForCausalLM.from_pretrained(hf_path, dtype=torch.float32).to(dev).eval()
    arch = convert.arch_from_hf_config(hf.config)
    mc = build_gpt_model(arch, tp=1)
    load_weights(mc, convert.hf_to_mcore(arch, {k: v.cpu() for k, v in hf.state_dict().items()}))
    mc = mc.to(dev).eval()
    input_ids, attn = input_ids.to(dev), attn.to(dev)
    positions = (attn.cumsum(-1) - 1).clamp(min=0)
    with torch.no_grad():
        ref = hf(input_ids=input_ids, attention_mask=attn, position_ids=positions).logits
        got = forward_logits(mc, input_ids, attn)
    keep = attn.bool()
    return float((got[keep] - ref[keep]).abs().max()), float(ref[keep].abs().max())


@pytest.mark.parametrize("model", ["tiny_llama", "tiny_qwen2"])
def test_converted_logits_match_transformers(
    megatron_single_rank: None, model: str, request: pytest.FixtureRequest, tracker
) -> None:
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(4, 1000, (3, 24), generator=g)
    attn = torch.ones_like(ids)
    attn[1, 17:] = 0  # right padding
    attn[2, :5] = 0  # left padding (positions come from the mask on both sides)
    err, scale = compare(request.getfixturevalue(model), ids, attn)
    tracker.track("max_abs_logit_error", err)
    assert scale > 0.1  # the comparison is not between two near-zero outputs
    assert err < LOGITS_ATOL


def test_megatron_weights_export_back_to_transformers(megatron_single_rank: None, tiny_qwen2: str) -> None:
    hf = AutoModelForCausalLM.from_pretrained(tiny_qwen2, dtype=torch.float32)
    arch = convert.arch_from_hf_config(hf.config)
    mc = build_gpt_model(arch, tp=1)
    load_weights(mc, convert.hf_to_mcore(arch, hf.state_dict()))
    back = convert.mcore_to_hf(arch, model_weights(mc))
    assert all(torch.equal(back[k], v) for k, v in hf.state_dict().items())


def test_loading_wrong_weights_fails_with_a_clear_error(megatron_single_rank: None, tiny_llama: str) -> None:
    hf = AutoModelForCausalLM.from_pretrained(tiny_llama, dtype=torch.float32)
    arch = convert.arch_from_hf_config(hf.config)
    weights = convert.hf_to_mcore(arch, hf.state_dict())
    del weights["output_layer.weight"]
    with pytest.raises(ValueError, match="missing \\['output_layer.weight'\\]"):
        load_weights(build_gpt_model(arch, tp=1), weights)


@pytest.mark.hf_gated(LLAMA_1B)
def test_llama_3_2_1b_converts_exactly_and_matches_logits(megatron_single_rank: None, tracker) -> None:
    """A real gated checkpoint (tied embeddings, llama3 rope scaling, 16 layers)."""
    hf = AutoModelForCausalLM.from_pretrained(LLAMA_1B, dtype=torch.float32)
    arch = convert.arch_from_hf_config(hf.config)
    assert arch.tie_word_embeddings and arch.rope_llama3_factor is not None
    sd = {k: v for k, v in hf.state_dict().items() if k != "lm_head.weight"}  # tied: one tensor
    back = convert.mcore_to_hf(arch, convert.hf_to_mcore(arch, sd))
    assert back.keys() == sd.keys() and all(torch.equal(back[k], sd[k]) for k in sd)
    del hf
    ids = torch.tensor([[128000, 791, 6864, 315, 9822, 374, 12366, 13, 578, 6864, 315, 9635, 374]])
    err, scale = compare(LLAMA_1B, ids, torch.ones_like(ids))
    tracker.track("max_abs_logit_error", err)
    # 16 layers and a 128k vocabulary in float32: rounding differences grow, still far below
    # the logit scale (~20).
    assert scale > 1.0
    assert err < 2e-3
