"""Loss functions handed to policy workers (they satisfy models.policy.interfaces.LossFunction)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import torch
from torch import Tensor


class NLLLoss:
    """Negative log-likelihood summed over `token_mask` tokens (assistant tokens in SFT)."""

    def __call__(self, logprobs: Tensor, batch: Mapping[str, Tensor]) -> tuple[Tensor, dict[str, Tensor]]:
        mask = batch["token_mask"].to(logprobs.dtype)
        loss = -(logprobs * mask).sum()
        return loss, {}


@dataclass(frozen=True)
class ClippedPGLoss:
    """Token-level clipped policy-gradient objective (PPO/GRPO), with an optional KL penalty.

    Per response token t: r = exp(logp - logp_gen); loss_t = -min(r * A, clip(r, 1-eps_lo, 1+eps_hi) * A)
    + kl_coef * KL_t, where KL_t is the k3 estimator exp(ref - logp) - (ref - logp) - 1 against the
    frozen reference policy. Inputs in the batch: `advantages` [B] or [B, T], `generation_logprobs`
    and (if kl_coef > 0) `reference_logprobs`, both [B, T]; `token_mask` selects response tokens.
    """

    ratio_clip_min: float = 0.2
    ratio_clip_max: float = 0.2
    kl_coef: float = 0.0

    def __call__(self, logprobs: Tensor, batch: Mapping[str, Tensor]) -> tuple[Tensor, dict[str, Tensor]]:
        mask = batch["token_mask"].to(logprobs.dtype)
        adv = batch["advantages"].to(logprobs.dtype)
        if adv.dim() == 1:
            adv = adv[:, None].expand_as(logprobs)
        ratio = torch.exp(logprobs - batch["generation_logprobs"].to(logprobs.dtype))
        clipped = ratio.clamp(1.0 - self.ratio_clip_min, 1.0 + self.ratio_clip_max)
        per_token = -torch.minimum(ratio * adv, clipped * adv)
        metrics: dict[str, Tensor] = {
            "clip_fraction": ((ratio != clipped).to(logprobs.dtype) * mask).sum().detach(),
        }
        if "reference_logprobs" in batch:
            diff = batch["reference_logprobs"].to(logprobs.dtype) - logprobs
            kl = torch.exp(diff) - diff - 1.0
            metrics["kl"] = (kl * mask).sum().detach()
            if self.kl_coef:
                per_token = per_token + self.kl_coef * kl
        return (per_token * mask).sum(), metrics
