"""The SFT example end to end with the Megatron worker.

A module of its own: test_megatron_worker.py holds a worker for its whole module, and on a
one-GPU machine this test's cluster could not reserve the GPU until that worker is gone.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
import torch

pytestmark = [pytest.mark.mcore, pytest.mark.filterwarnings("ignore::UserWarning")]

REPO = Path(__file__).resolve().parents[4]


def test_sft_example_runs_with_the_megatron_worker(
    ray_cluster: object, megatron_worker: str, tmp_path: Path, tracker, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.syspath_prepend(str(REPO / "examples"))  # as when run as a script: its helpers sit beside it
    spec = importlib.util.spec_from_file_location("run_sft", REPO / "examples" / "run_sft.py")
    assert spec and spec.loader
    run_sft = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(run_sft)
    steps = 6
    rc = run_sft.main(
        [
            "policy.megatron_cfg.enabled=true",
            f"sft.max_num_steps={steps}",
            "sft.val_period=3",
            "sft.val_batches=1",
            "policy.train_global_batch_size=8",
            "policy.train_micro_batch_size=8",
            "sft.val_global_batch_size=8",
            "policy.precision=float32",
            f"logger.log_dir={tmp_path / 'logs'}",
            "logger.monitor_gpus=false",
            f"checkpointing.checkpoint_dir={tmp_path / 'ck'}",
            f"checkpointing.save_period={steps}",
        ]
    )
    assert rc == 0
    state = json.loads((tmp_path / "ck" / f"step_{steps}" / "training_state.json").read_text())
    tracker.track("final_train_loss", state["train/loss"])
    assert state["step"] == steps
    assert 0 < state["train/loss"] < 100 and 0 < state["val/loss"] < 100
    assert (tmp_path / "ck" / f"step_{steps}" / "policy" / "hf" / "model.safetensors").is_file()
    # Written by the Megatron worker (the DTensor worker's checkpoint has no such format tag).
    saved = torch.load(tmp_path / "ck" / f"step_{steps}" / "policy" / "policy.pt", weights_only=False)
    assert saved["format"] == "nemo_rl.megatron.v1"
