"""Evaluation (nemo_rl/algorithms/eval.py): what is scored, and a real run over a run's checkpoints."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from nemo_rl.algorithms.eval import models_to_score
from nemo_rl.distributed.reuse import reuse_workers
from tests.unit.policy_helpers import one_worker_gpus

ROOT = Path(__file__).resolve().parents[3]


def _example(name: str):
    if str(ROOT / "examples") not in sys.path:  # as when run as a script: its folder is importable
        sys.path.insert(0, str(ROOT / "examples"))
    spec = importlib.util.spec_from_file_location(name, ROOT / "examples" / f"{name}.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _by_step(log_dir: Path, tag: str) -> dict[int, float]:
    acc = EventAccumulator(str(log_dir), size_guidance={"scalars": 0})
    acc.Reload()
    return {e.step: e.value for e in acc.Scalars(tag)}


def test_models_to_score_in_step_order(tmp_path: Path) -> None:
    for step in (20, 5, 10):
        (tmp_path / f"step_{step}").mkdir()
        if step != 10:  # step 10 never finished writing: not a checkpoint
            (tmp_path / f"step_{step}" / "training_state.json").write_text("{}")
    assert models_to_score(str(tmp_path), base_model=True) == [
        (0, None),
        (5, tmp_path / "step_5" / "policy"),
        (20, tmp_path / "step_20" / "policy"),
    ]
    assert models_to_score(str(tmp_path), base_model=False)[0][0] == 5
    assert models_to_score(None, base_model=True) == [(0, None)]
    assert models_to_score(str(tmp_path / "missing"), base_model=False) == []


def test_eval_scores_the_base_model_and_each_checkpoint(
    ray_cluster, tiny_llama: str, test_assets: Path, tmp_path: Path, tracker
) -> None:
    """6 SFT steps with checkpoints at 3 and 6, then examples/run_eval.py over that run: the base
    model at step 0 and each checkpoint at its step. The last checkpoint's eval/loss is SFT's own
    val/loss at step 6 (same weights, same records), so the checkpoint was the model evaluated.
    Both runs share one policy worker (reuse_workers): the evaluation re-initialises it from the
    model folder, as a new worker would."""
    data = test_assets / "data"
    val = tmp_path / "val32.jsonl"  # 32 held-out chats: two batches of 16 for both runs
    val.write_text("\n".join((data / "math_sft_val.jsonl").read_text().splitlines()[:32]) + "\n")
    common = [f"policy.model_name={tiny_llama}", f"cluster.gpus_per_worker={one_worker_gpus()}", f"data.val_path={val}"]
    sft = [
        *common,
        "sft.max_num_steps=6",
        "sft.val_period=6",
        "sft.val_batches=2",
        "sft.val_global_batch_size=16",
        f"data.train_path={data / 'math_sft_train.jsonl'}",
        f"checkpointing.checkpoint_dir={tmp_path / 'ck'}",
        "checkpointing.save_period=3",
        f"logger.log_dir={tmp_path / 'sft'}",
        "logger.monitor_gpus=false",
    ]
    evaluation = [
        *common,
        f"eval.checkpoint_dir={tmp_path / 'ck'}",
        "eval.loss_batch_size=16",
        "eval.num_prompts=4",
        "eval.max_new_tokens=4",
        f"data.math_path={data / 'math_val.jsonl'}",
        f"logger.log_dir={tmp_path / 'eval'}",
        "logger.monitor_gpus=false",
    ]
    with reuse_workers():
        assert _example("run_sft").main(sft) == 0
        assert _example("run_eval").main(evaluation) == 0
    loss = _by_step(tmp_path / "eval", "eval/loss")
    accuracy = _by_step(tmp_path / "eval", "eval/accuracy")
    tracker.track("base_loss", loss[0])
    tracker.track("trained_loss", loss[6])
    assert sorted(loss) == sorted(accuracy) == [0, 3, 6]
    assert loss[6] < loss[3] < loss[0]
    assert loss[6] == pytest.approx(_by_step(tmp_path / "sft", "val/loss")[6], rel=1e-4)
    assert all(0.0 <= a <= 1.0 for a in accuracy.values())
