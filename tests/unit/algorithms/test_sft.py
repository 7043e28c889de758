"""A short SFT run through the user entry point, examples/run_sft.py."""

import importlib.util
import shutil
import sys
from pathlib import Path

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from nemo_rl.distributed.reuse import reuse_workers
from tests.unit.policy_helpers import one_worker_gpus

ROOT = Path(__file__).resolve().parents[3]


def _run_sft_module():
    if str(ROOT / "examples") not in sys.path:  # as when run as a script: its folder is importable
        sys.path.insert(0, str(ROOT / "examples"))
    spec = importlib.util.spec_from_file_location("run_sft", ROOT / "examples" / "run_sft.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _scalars(log_dir: Path, tag: str) -> list[float]:
    return list(_by_step(log_dir, tag).values())


def _by_step(log_dir: Path, tag: str) -> dict[int, float]:
    acc = EventAccumulator(str(log_dir), size_guidance={"scalars": 0})
    acc.Reload()
    return {e.step: e.value for e in acc.Scalars(tag)}


def test_sft_example_loss_falls_and_resumes(
    ray_cluster, tiny_llama: str, test_assets: Path, tmp_path: Path, tracker
) -> None:
    """12 steps: the loss falls, validation runs twice, checkpoints at 6 and 12. Then the run is
    cut back to its step-6 checkpoint and resumed to step 8: steps 7 and 8 must score the losses
    the first run had, so weights, optimizer, scheduler and data position all came back from
    disk. Both runs share one policy worker (reuse_workers): the resumed run re-initialises it
    from the model folder and then loads the checkpoint, as a new worker would, without a new
    process importing torch and transformers again."""
    run_sft = _run_sft_module()
    args = [
        f"policy.model_name={tiny_llama}",
        "sft.max_num_steps=12",
        "sft.val_period=6",
        f"data.train_path={test_assets / 'data' / 'sft_train.jsonl'}",
        f"data.val_path={test_assets / 'data' / 'sft_val.jsonl'}",
        f"checkpointing.checkpoint_dir={tmp_path / 'ck'}",
        "checkpointing.save_period=6",
        f"logger.log_dir={tmp_path / 'logs'}",
        f"cluster.gpus_per_worker={one_worker_gpus()}",
    ]
    with reuse_workers():
        assert run_sft.main(args) == 0
        losses = _scalars(tmp_path / "logs", "train/loss")
        tracker.track("first_loss", losses[0])
        tracker.track("last_loss", losses[-1])
        assert len(losses) == 12 and losses[-1] < 0.7 * losses[0]
        assert len(_scalars(tmp_path / "logs", "val/loss")) == 2
        assert sorted(p.name for p in (tmp_path / "ck").iterdir()) == ["step_12", "step_6"]
        # Resume from what is on disk: the step-6 checkpoint (step 12's removed), on to step 8.
        shutil.rmtree(tmp_path / "ck" / "step_12")
        resumed = [a for a in args if not a.startswith(("sft.max_num_steps=", "logger.log_dir="))]
        assert run_sft.main([*resumed, "sft.max_num_steps=8", f"logger.log_dir={tmp_path / 'logs2'}"]) == 0
    replayed = _by_step(tmp_path / "logs2", "train/loss")
    assert sorted(replayed) == [7, 8]
    # Each run marks its first step: the resumed one began after its checkpoint.
    assert _by_step(tmp_path / "logs", "run/first_step") == {1: 1.0}
    assert _by_step(tmp_path / "logs2", "run/first_step") == {7: 7.0}
    assert _by_step(tmp_path / "logs2", "run/num_workers") == {7: 1.0}
    assert [replayed[7], replayed[8]] == pytest.approx(losses[6:8], rel=5e-3)
    assert sorted(p.name for p in (tmp_path / "ck").iterdir()) == ["step_6", "step_8"]


def test_bad_override_is_a_one_line_error(capsys) -> None:
    assert _run_sft_module().main(["sft.max_num_stepz=3"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == "error: unknown config key 'sft.max_num_stepz' (use +sft.max_num_stepz=... to add a new key)"
