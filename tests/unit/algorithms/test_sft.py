"""A short SFT run through the user entry point, examples/run_sft.py."""

import importlib.util
import sys
from pathlib import Path

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

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
    acc = EventAccumulator(str(log_dir), size_guidance={"scalars": 0})
    acc.Reload()
    return [e.value for e in acc.Scalars(tag)]


def test_sft_example_loss_falls_and_resumes(
    ray_cluster, tiny_llama: str, test_assets: Path, tmp_path: Path, tracker
) -> None:
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
    assert run_sft.main(args) == 0
    losses = _scalars(tmp_path / "logs", "train/loss")
    tracker.track("first_loss", losses[0])
    tracker.track("last_loss", losses[-1])
    assert len(losses) == 12 and losses[-1] < 0.7 * losses[0]
    assert len(_scalars(tmp_path / "logs", "val/loss")) == 2
    assert sorted(p.name for p in (tmp_path / "ck").iterdir()) == ["step_12", "step_6"]
    # Resume from step 12 and go on to 14.
    assert run_sft.main(args[:1] + ["sft.max_num_steps=14"] + args[2:]) == 0
    assert (tmp_path / "ck" / "step_14").is_dir()


def test_bad_override_is_a_one_line_error(capsys) -> None:
    assert _run_sft_module().main(["sft.max_num_stepz=3"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == "error: unknown config key 'sft.max_num_stepz' (use +sft.max_num_stepz=... to add a new key)"
