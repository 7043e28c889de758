"""Chat templating, tokenisation with assistant-only loss masks, and padding into batches."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor

from nemo_rl.data.datasets import Message


def tokenize_conversation(tokenizer: Any, messages: Sequence[Message], max_length: int) -> tuple[list[int], list[int]]:
    """Token ids of the templated conversation and a 0/1 mask that is 1 on assistant tokens.

    Each message's tokens are the difference between the templated prefix with it and without
    it, so the mask follows whatever chat template the tokenizer carries. Truncated to max_length.
    """
    ids: list[int] = []
    mask: list[int] = []
    for i, msg in enumerate(messages):
        prefix = tokenizer.apply_chat_template(list(messages[: i + 1]), tokenize=True, add_generation_prompt=False)
        prefix = _as_ids(prefix)
        if prefix[: len(ids)] != ids:
            raise ValueError("the chat template is not prefix-stable; cannot build an assistant mask")
        new = prefix[len(ids) :]
        if msg["role"] == "assistant":
            # The role header belongs to the prompt; the content and end marker are learned.
            header = (
                _as_ids(tokenizer.apply_chat_template(list(messages[:i]), tokenize=True, add_generation_prompt=True))
                if i
                else []
            )
            n_header = max(0, len(header) - len(ids)) if header[: len(ids)] == ids else 0
            mask += [0] * n_header + [1] * (len(new) - n_header)
        else:
            mask += [0] * len(new)
        ids = prefix
    return ids[:max_length], mask[:max_length]


def _as_ids(out: Any) -> list[int]:
    if isinstance(out, dict) or hasattr(out, "keys"):
        out = out["input_ids"]
    return [int(t) for t in out]


def prompt_ids(tokenizer: Any, messages: Sequence[Message]) -> list[int]:
    """Templated prompt ending with the assistant header, ready for generation."""
    return _as_ids(tokenizer.apply_chat_template(list(messages), tokenize=True, add_generation_prompt=True))


def pad_batch(
    sequences: Sequence[Sequence[int]],
    pad_id: int,
    masks: Sequence[Sequence[int]] | None = None,
    left: bool = False,
    pad_to_multiple_of: int = 1,
) -> dict[str, Tensor]:
    """Pad to a common length: `input_ids`, `attention_mask` (+ `token_mask` when masks given)."""
    longest = max(len(s) for s in sequences)
    length = -(-longest // pad_to_multiple_of) * pad_to_multiple_of
    ids = torch.full((len(sequences), length), pad_id, dtype=torch.long)
    attn = torch.zeros((len(sequences), length), dtype=torch.long)
    tmask = torch.zeros((len(sequences), length), dtype=torch.float32)
    for i, seq in enumerate(sequences):
        n = len(seq)
        sl = slice(length - n, length) if left else slice(0, n)
        ids[i, sl] = torch.tensor(list(seq), dtype=torch.long)
        attn[i, sl] = 1
        if masks is not None:
            tmask[i, sl] = torch.tensor(list(masks[i]), dtype=torch.float32)
    out = {"input_ids": ids, "attention_mask": attn}
    if masks is not None:
        out["token_mask"] = tmask
    return out


def sft_batch(tokenizer: Any, conversations: Sequence[Sequence[Message]], max_length: int) -> dict[str, Tensor]:
    """Right-padded training batch with assistant-only `token_mask`."""
    pairs = [tokenize_conversation(tokenizer, conv, max_length) for conv in conversations]
    return pad_batch([p[0] for p in pairs], tokenizer.pad_token_id, masks=[p[1] for p in pairs])
