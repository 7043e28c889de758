"""Step-numbered checkpoint folders: `<dir>/step_<N>/` with `training_state.json`, newest wins."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any


class CheckpointManager:
    def __init__(self, checkpoint_dir: str | Path, keep_top_k: int = 2) -> None:
        self.dir = Path(checkpoint_dir)
        self.keep_top_k = keep_top_k

    def step_dir(self, step: int) -> Path:
        return self.dir / f"step_{step}"

    def complete_steps(self) -> list[int]:
        """Steps whose checkpoint finished writing (training_state.json is written last)."""
        if not self.dir.is_dir():
            return []
        steps = []
        for p in self.dir.glob("step_*"):
            suffix = p.name.removeprefix("step_")
            if suffix.isdigit() and (p / "training_state.json").is_file():
                steps.append(int(suffix))
        return sorted(steps)

    def latest(self) -> Path | None:
        steps = self.complete_steps()
        return self.step_dir(steps[-1]) if steps else None

    def finalize(self, step: int, state: dict[str, Any]) -> None:
        """Mark step complete (atomically) and prune old checkpoints."""
        path = self.step_dir(step)
        path.mkdir(parents=True, exist_ok=True)
        tmp = path / "training_state.json.tmp"
        tmp.write_text(json.dumps(state, indent=2))
        os.replace(tmp, path / "training_state.json")
        for old in self.complete_steps()[: -self.keep_top_k] if self.keep_top_k > 0 else []:
            shutil.rmtree(self.step_dir(old), ignore_errors=True)
