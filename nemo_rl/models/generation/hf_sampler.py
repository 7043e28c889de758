"""Batched sampling with a Hugging Face causal LM and its KV cache.

Works under FSDP2: every rank must run the same number of forward passes, so the loop
ends only when `all_done` says every rank has finished (an all-reduce in the worker).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from nemo_rl.models.generation.interfaces import GenerationConfig, GenerationOutput


def _sample(logits: Tensor, cfg: GenerationConfig, gen: torch.Generator) -> tuple[Tensor, Tensor]:
    """Next tokens and their log-probabilities under the temperature-scaled distribution."""
    logits = logits.float()
    if cfg["temperature"] <= 0:
        logp = torch.log_softmax(logits, dim=-1)
        tok = logp.argmax(dim=-1)
        return tok, logp.gather(-1, tok[:, None]).squeeze(-1)
    logp = torch.log_softmax(logits / cfg["temperature"], dim=-1)
    probs = logp.exp()
    if cfg["top_p"] < 1.0:
        sorted_p, order = probs.sort(dim=-1, descending=True)
        drop = sorted_p.cumsum(-1) - sorted_p > cfg["top_p"]  # keep the smallest set reaching top_p
        sorted_p = sorted_p.masked_fill(drop, 0.0)
        probs = torch.zeros_like(probs).scatter(-1, order, sorted_p)
    tok = torch.multinomial(probs.cpu(), 1, generator=gen).squeeze(-1).to(logits.device)
    return tok, logp.gather(-1, tok[:, None]).squeeze(-1)


@torch.no_grad()
def generate(
    model: Any,
    input_ids: Tensor,
    attention_mask: Tensor,
    cfg: GenerationConfig,
    stop_token_ids: list[int],
    pad_token_id: int,
    all_done: Callable[[bool], bool] = lambda done: done,
    seed_offset: int = 0,
) -> GenerationOutput:
    """Sample up to cfg["max_new_tokens"] tokens after left-padded prompts."""
    from transformers import DynamicCache

    device = input_ids.device
    gen = torch.Generator().manual_seed(int(cfg["seed"]) + seed_offset)
    batch, prompt_len = input_ids.shape
    attn = attention_mask.clone()
    positions = (attn.cumsum(-1) - 1).clamp(min=0)
    # transformers renamed `past_key_values` to `cache`; accept whichever this version takes.
    cache_kw = "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"
    cache = {cache_kw: DynamicCache()}
    out = model(input_ids=input_ids, attention_mask=attn, position_ids=positions, use_cache=True, **cache)
    logits = out.logits[:, -1]
    next_pos = positions[:, -1] + 1
    stop = torch.tensor(stop_token_ids, device=device)
    finished = torch.zeros(batch, dtype=torch.bool, device=device)
    hit_stop = torch.zeros(batch, dtype=torch.bool, device=device)
    tokens: list[Tensor] = []
    lps: list[Tensor] = []
    alive: list[Tensor] = []
    for step in range(cfg["max_new_tokens"]):
        tok, lp = _sample(logits, cfg, gen)
        tok = torch.where(finished, torch.full_like(tok, pad_token_id), tok)
        tokens.append(tok)
        lps.append(torch.where(finished, torch.zeros_like(lp), lp))
        alive.append(~finished)
        is_stop = torch.isin(tok, stop) & ~finished
        hit_stop |= is_stop
        finished |= is_stop
        if all_done(bool(finished.all())) or step == cfg["max_new_tokens"] - 1:
            break
        attn = torch.cat([attn, torch.ones((batch, 1), dtype=attn.dtype, device=device)], dim=-1)
        out = model(
            input_ids=tok[:, None], attention_mask=attn, position_ids=next_pos[:, None], use_cache=True, **cache
        )
        logits = out.logits[:, -1]
        next_pos = next_pos + 1
    if tokens:
        new = torch.stack(tokens, dim=1)
        new_lp = torch.stack(lps, dim=1)
        new_mask = torch.stack(alive, dim=1).to(torch.float32)
    else:
        new = torch.empty((batch, 0), dtype=torch.long, device=device)
        new_lp = torch.empty((batch, 0), device=device)
        new_mask = torch.empty((batch, 0), device=device)
    return GenerationOutput(
        output_ids=torch.cat([input_ids, new], dim=1),
        logprobs=torch.cat([torch.zeros((batch, prompt_len), device=device), new_lp], dim=1),
        response_mask=torch.cat([torch.zeros((batch, prompt_len), device=device), new_mask], dim=1),
        prompt_length=prompt_len,
        stop_reasons=["stop" if s else "length" for s in hit_stop.tolist()],
    )
