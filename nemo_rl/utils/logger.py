"""Metrics to TensorBoard event files and to the terminal (rich), plus the GPU monitor."""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import TypedDict

from rich.console import Console

from nemo_rl.utils.gpu_monitor import GpuMonitor


class LoggerConfig(TypedDict):
    log_dir: str
    tensorboard_enabled: bool
    monitor_gpus: bool
    gpu_monitor_interval_s: float


class Logger:
    def __init__(self, cfg: LoggerConfig) -> None:
        self.cfg = cfg
        self.console = Console(highlight=False)
        self.writer = None
        if cfg["tensorboard_enabled"]:
            from torch.utils.tensorboard import SummaryWriter

            Path(cfg["log_dir"]).mkdir(parents=True, exist_ok=True)
            self.writer = SummaryWriter(log_dir=cfg["log_dir"])
        self.gpu_monitor = GpuMonitor(cfg["gpu_monitor_interval_s"]) if cfg["monitor_gpus"] else None

    def log(self, metrics: Mapping[str, float], step: int, print_line: bool = True) -> None:
        metrics = dict(metrics)
        if self.gpu_monitor is not None:
            metrics.update(self.gpu_monitor.collect())
        if self.writer is not None:
            for k, v in metrics.items():
                self.writer.add_scalar(k, float(v), step)
        if print_line:
            shown = "  ".join(f"{k}={_fmt(v)}" for k, v in metrics.items() if not k.startswith("gpu/"))
            self.console.print(f"[bold]step {step:>4}[/bold]  {shown}")

    def close(self) -> None:
        if self.writer is not None:
            self.writer.flush()
            self.writer.close()


def _fmt(v: float) -> str:
    if isinstance(v, float) and (math.isnan(v) or abs(v) >= 1e4 or (v and abs(v) < 1e-3)):
        return f"{v:.3e}"
    return f"{v:.4f}" if isinstance(v, float) else str(v)
