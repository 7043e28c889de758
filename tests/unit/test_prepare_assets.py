"""The asset builder when several processes ask for the assets at once, as the xdist
workers of a fresh clone do through the `test_assets` fixture."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parent / "prepare_unit_test_assets.py"


def test_two_processes_preparing_at_once_build_each_asset_once(tmp_path: Path) -> None:
    out = tmp_path / "assets"
    procs = [
        subprocess.Popen(
            [sys.executable, str(SCRIPT), "--out", str(out)],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for _ in range(2)
    ]
    logs = [p.communicate(timeout=600)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], logs
    built = [line for log in logs for line in log.splitlines() if "[assets] built" in line]
    reused = [line for log in logs for line in log.splitlines() if "[assets] reuse" in line]
    models = ("tiny_llama", "tiny_qwen2", "tiny_llama_tied", "tiny_qwen3", "tiny_gemma3", "tiny_nemotron5_h")
    steps = 2 + len(models)  # data, tokenizer, the models: one build each
    assert len(built) == steps and len(reused) == steps, logs
    for model in models:
        assert (out / model / "model.safetensors").is_file()
        assert (out / model / "tokenizer.json").is_file()
