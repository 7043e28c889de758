import torch

from nemo_rl.algorithms.loss_functions import ClippedPGLoss, NLLLoss


def test_nll_counts_masked_tokens_only() -> None:
    lp = torch.tensor([[0.0, -1.0, -2.0, -3.0]])
    loss, _ = NLLLoss()(lp, {"token_mask": torch.tensor([[0.0, 0.0, 1.0, 1.0]])})
    assert loss.item() == 5.0


def test_clipped_pg_matches_direct_formula_and_clips_both_sides() -> None:
    eps = 0.2
    gen = torch.zeros(1, 4)
    # ratios e^x: 1.5 (clipped high), 0.5 (clipped low), 1.1 (inside), padding
    lp = torch.log(torch.tensor([[1.5, 0.5, 1.1, 1.0]]))
    mask = torch.tensor([[1.0, 1.0, 1.0, 0.0]])
    for adv in (1.0, -1.0):
        loss, metrics = ClippedPGLoss(eps, eps)(
            lp, {"token_mask": mask, "advantages": torch.tensor([adv]), "generation_logprobs": gen}
        )
        r = torch.tensor([1.5, 0.5, 1.1])
        expected = -torch.minimum(r * adv, r.clamp(1 - eps, 1 + eps) * adv).sum()
        assert torch.allclose(loss, expected)
        assert metrics["clip_fraction"].item() == 2.0
    # Positive advantage: the high ratio is capped at 1.2; negative: the low ratio is floored at 0.8.
    pos, _ = ClippedPGLoss(eps, eps)(
        lp[:, :1], {"token_mask": mask[:, :1], "advantages": torch.tensor([1.0]), "generation_logprobs": gen[:, :1]}
    )
    neg, _ = ClippedPGLoss(eps, eps)(
        lp[:, 1:2], {"token_mask": mask[:, :1], "advantages": torch.tensor([-1.0]), "generation_logprobs": gen[:, :1]}
    )
    assert torch.isclose(pos, torch.tensor(-1.2)) and torch.isclose(neg, torch.tensor(0.8))


def test_kl_penalty_uses_k3_estimator() -> None:
    lp = torch.tensor([[0.0, -1.0]])
    ref = torch.tensor([[0.0, -0.5]])
    batch = {
        "token_mask": torch.tensor([[0.0, 1.0]]),
        "advantages": torch.tensor([0.0]),
        "generation_logprobs": lp.clone(),
        "reference_logprobs": ref,
    }
    loss, metrics = ClippedPGLoss(kl_coef=0.5)(lp, batch)
    kl = torch.exp(torch.tensor(0.5)) - 0.5 - 1
    assert torch.isclose(metrics["kl"], kl) and torch.isclose(loss, 0.5 * kl)


def test_gradient_flows_only_through_current_logprobs() -> None:
    lp = torch.zeros(2, 3, requires_grad=True)
    batch = {
        "token_mask": torch.ones(2, 3),
        "advantages": torch.tensor([1.0, -1.0]),
        "generation_logprobs": torch.zeros(2, 3),
    }
    loss, _ = ClippedPGLoss()(lp, batch)
    loss.backward()
    assert torch.allclose(lp.grad, torch.tensor([[-1.0] * 3, [1.0] * 3]))
