"""HF <-> megatron-core weight conversion and tensor-parallel sharding (pure torch, exact)."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoConfig, AutoModelForCausalLM

from nemo_rl.models.megatron import convert

pytestmark = [pytest.mark.mcore, pytest.mark.filterwarnings("ignore::UserWarning")]


def hf_state(path: str) -> tuple[object, dict[str, torch.Tensor]]:
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    return model.config, {k: v.detach().clone() for k, v in model.state_dict().items()}


@pytest.mark.parametrize("model", ["tiny_llama", "tiny_qwen2"])
def test_hf_to_mcore_to_hf_is_exact(model: str, request: pytest.FixtureRequest) -> None:
    cfg, hf = hf_state(request.getfixturevalue(model))
    arch = convert.arch_from_hf_config(cfg)
    back = convert.mcore_to_hf(arch, convert.hf_to_mcore(arch, hf))
    assert back.keys() == hf.keys()
    for k in hf:
        assert torch.equal(back[k], hf[k]), k
    assert arch.qkv_bias == (model == "tiny_qwen2")


def test_fused_qkv_layout_groups_queries_with_their_key_and_value(tiny_llama: str) -> None:
    cfg, hf = hf_state(tiny_llama)
    arch = convert.arch_from_hf_config(cfg)
    qkv = convert.hf_to_mcore(arch, hf)["decoder.layers.0.self_attention.linear_qkv.weight"]
    hd, per = arch.head_dim, arch.heads_per_group
    group1 = qkv[(per + 2) * hd : (per + 2) * hd * 2]  # the second key/value group
    q = hf["model.layers.0.self_attn.q_proj.weight"]
    k = hf["model.layers.0.self_attn.k_proj.weight"]
    assert torch.equal(group1[: per * hd], q[per * hd : 2 * per * hd])
    assert torch.equal(group1[per * hd : (per + 1) * hd], k[hd : 2 * hd])


@pytest.mark.parametrize("tp", [2])
def test_tensor_parallel_shards_reassemble_exactly(tiny_qwen2: str, tp: int) -> None:
    cfg, hf = hf_state(tiny_qwen2)
    arch = convert.arch_from_hf_config(cfg)
    full = convert.hf_to_mcore(arch, hf)
    shards = [convert.shard_for_rank(full, r, tp) for r in range(tp)]
    fc1 = "decoder.layers.0.mlp.linear_fc1.weight"
    assert shards[0][fc1].shape[0] == full[fc1].shape[0] // tp
    # rank 0 holds the first half of gate and the first half of up, not just "the gate".
    gate, up = full[fc1].chunk(2)
    assert torch.equal(shards[0][fc1], torch.cat([gate.chunk(tp)[0], up.chunk(tp)[0]]))
    again = convert.unshard(shards)
    assert again.keys() == full.keys()
    assert all(torch.equal(again[k], full[k]) for k in full)


def test_unsupported_configs_get_one_line_errors(tiny_llama: str) -> None:
    cfg = AutoConfig.from_pretrained(tiny_llama)
    cfg.model_type = "gpt2"
    with pytest.raises(convert.ConversionError, match="model_type 'gpt2' is not supported"):
        convert.arch_from_hf_config(cfg)
    arch = convert.arch_from_hf_config(AutoConfig.from_pretrained(tiny_llama))
    with pytest.raises(
        convert.ConversionError, match="num_key_value_heads=2 is not divisible by tensor_model_parallel_size=4"
    ):
        convert.check_tensor_parallel(arch, 4)
