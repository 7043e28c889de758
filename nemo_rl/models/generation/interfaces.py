"""What generation takes and gives: the config and the output the algorithms read."""

from __future__ import annotations

from typing import TypedDict

from torch import Tensor


class GenerationConfig(TypedDict):
    max_new_tokens: int
    temperature: float  # 0 = greedy
    top_p: float
    seed: int


class GenerationOutput(TypedDict):
    """Left-padded prompts followed by right-padded responses.

    output_ids: [B, P + N]; logprobs: [B, P + N] (0 outside responses); response_mask: 1 on
    generated tokens (the stop token included); stop_reasons: "stop" or "length" per row.
    """

    output_ids: Tensor
    logprobs: Tensor
    response_mask: Tensor
    prompt_length: int
    stop_reasons: list[str]
