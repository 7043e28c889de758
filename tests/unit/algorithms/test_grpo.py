import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from nemo_rl.algorithms.grpo import default_config_path, group_advantages, grpo_train
from nemo_rl.config import load_config
from nemo_rl.distributed.reuse import reuse_workers
from tests.unit.policy_helpers import one_worker_gpus


def test_group_advantages_on_hand_made_groups() -> None:
    rewards = torch.tensor([1.0, 0.0, 0.0, 1.0, 1.0, 1.0, 0.0, 0.5])
    adv = group_advantages(rewards, group_size=4, normalize=False)
    assert torch.allclose(adv, torch.tensor([0.5, -0.5, -0.5, 0.5, 0.375, 0.375, -0.625, -0.125]))
    norm = group_advantages(rewards, group_size=4, normalize=True)
    assert torch.allclose(
        norm[:4], torch.tensor([0.5, -0.5, -0.5, 0.5]) / torch.tensor([1.0, 0, 0, 1]).std(), atol=1e-4
    )
    # A group where every answer scores the same carries no signal.
    assert torch.equal(group_advantages(torch.ones(4), 4, normalize=True), torch.zeros(4))


def test_group_advantages_reject_ragged_groups() -> None:
    try:
        group_advantages(torch.ones(5), 4, normalize=False)
    except ValueError as e:
        assert "groups of 4" in str(e)
    else:
        raise AssertionError("expected ValueError")


def test_one_grpo_step_through_ray(ray_cluster, tiny_llama: str, tmp_path, tracker) -> None:
    """Two GRPO steps (generation, rewards, reference logprobs, a clipped-PG update, validation,
    a checkpoint), then a longer run that resumes from the checkpoint on disk at step 2. Both
    runs share one policy worker (reuse_workers): the second re-initialises it from the model
    folder before loading the checkpoint, as a new worker would, without a new process."""
    cfg = load_config(
        default_config_path(),
        [
            f"policy.model_name={tiny_llama}",
            "grpo.max_num_steps=2",
            "grpo.num_prompts_per_step=2",
            "grpo.num_generations_per_prompt=4",
            "grpo.val_period=2",
            "grpo.val_num_prompts=4",
            "policy.generation.max_new_tokens=6",
            f"checkpointing.checkpoint_dir={tmp_path / 'ck'}",
            "checkpointing.save_period=2",
            f"logger.log_dir={tmp_path / 'logs'}",
            "logger.monitor_gpus=false",
            f"cluster.gpus_per_worker={one_worker_gpus()}",
        ],
    )
    with reuse_workers():
        metrics = grpo_train(cfg)  # type: ignore[arg-type]
        tracker.track("train_reward", metrics["train/reward"])
        for key in (
            "train/loss",
            "train/reward",
            "train/accuracy",
            "train/kl",
            "train/mean_gen_tokens",
            "train/grad_norm",
            "timing/generation_s",
            "val/accuracy",
        ):
            assert key in metrics and torch.isfinite(torch.tensor(metrics[key])), key
        assert 0 < metrics["train/mean_gen_tokens"] <= 6
        assert (tmp_path / "ck" / "step_2" / "policy" / "hf" / "model.safetensors").is_file()
        # Resume: a longer run picks up at step 2 from the checkpoint, and trains step 3 only.
        cfg["grpo"]["max_num_steps"] = 3
        cfg["logger"]["log_dir"] = str(tmp_path / "logs2")
        assert "train/loss" in grpo_train(cfg)  # type: ignore[arg-type]
    assert (tmp_path / "ck" / "step_3").is_dir()
    acc = EventAccumulator(str(tmp_path / "logs2"), size_guidance={"scalars": 0})
    acc.Reload()
    assert [e.step for e in acc.Scalars("train/loss")] == [3]
    assert [(e.step, e.value) for e in acc.Scalars("run/first_step")] == [(3, 3.0)]
