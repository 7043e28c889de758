"""The generation interface the algorithms use; a faster backend (e.g. vLLM) implements the same."""

from __future__ import annotations

from typing import Protocol, TypedDict

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


class GenerationBackend(Protocol):
    def generate(self, input_ids: Tensor, attention_mask: Tensor, cfg: GenerationConfig) -> GenerationOutput: ...
