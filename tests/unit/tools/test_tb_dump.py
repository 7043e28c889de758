"""TensorBoard event files -> metrics JSON (testharness.tb_dump), on files written here."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from testharness import tb_dump

REPO_ROOT = Path(__file__).resolve().parents[3]
ENTRY = REPO_ROOT / "tests" / "json_dump_tb_logs.py"


def write_scalars(log_dir: Path, scalars: dict[str, dict[int, float]]) -> Path:
    """One run directory written with torch's SummaryWriter; returns its events file."""
    from torch.utils.tensorboard import SummaryWriter

    writer = SummaryWriter(str(log_dir))
    for tag, series in scalars.items():
        for step, value in series.items():
            writer.add_scalar(tag, value, step)
    writer.close()
    (path,) = [p for p in log_dir.iterdir() if "tfevents" in p.name]
    return path


def write_tensor_scalars(log_dir: Path, tag: str, series: dict[int, float]) -> None:
    """Scalars in the tensor format (tf.summary / TensorBoard's own writer)."""
    from tensorboard.compat.proto import event_pb2, summary_pb2
    from tensorboard.summary.writer.event_file_writer import EventFileWriter
    from tensorboard.util import tensor_util

    writer = EventFileWriter(str(log_dir))
    plugin = summary_pb2.SummaryMetadata.PluginData(plugin_name="scalars")
    for step, value in series.items():
        summary_value = summary_pb2.Summary.Value(
            tag=tag,
            metadata=summary_pb2.SummaryMetadata(plugin_data=plugin),
            tensor=tensor_util.make_tensor_proto(np.float32(value)),
        )
        writer.add_event(
            event_pb2.Event(
                wall_time=time.time(),
                step=step,
                summary=summary_pb2.Summary(value=[summary_value]),
            )
        )
    writer.close()


def test_reads_every_step_without_sampling(tmp_path: Path) -> None:
    # TensorBoard's default reservoir keeps 10,000 scalars per tag; we must keep all.
    from torch.utils.tensorboard import SummaryWriter

    writer = SummaryWriter(str(tmp_path / "run"))
    for step in range(1, 12_001):
        writer.add_scalar("train/loss", 1.0 / step, step)
    writer.close()
    result = tb_dump.dump_tb_logs(tmp_path)
    series = result.metrics["train/loss"]
    assert len(series) == 12_000
    assert list(series)[:3] == ["1", "2", "3"]
    assert series["12000"] == pytest.approx(1.0 / 12_000)


def test_scalars_tensors_nested_dirs_and_non_scalars(tmp_path: Path) -> None:
    from torch.utils.tensorboard import SummaryWriter

    writer = SummaryWriter(str(tmp_path / "a" / "deep"))
    writer.add_scalar("train/loss", 2.5, 1)
    writer.add_scalar("val/loss", math.nan, 10)
    writer.add_histogram("weights", np.arange(10), 1)
    writer.add_text("note", "hello", 1)
    writer.close()
    write_tensor_scalars(tmp_path / "b", "gpu/mem", {1: 1.5, 2: 3.0})
    metrics = tb_dump.dump_tb_logs(tmp_path).metrics
    assert set(metrics) == {"train/loss", "val/loss", "gpu/mem"}
    assert metrics["gpu/mem"] == {"1": 1.5, "2": 3.0}
    assert math.isnan(metrics["val/loss"]["10"])


def test_steps_are_sorted_numerically(tmp_path: Path) -> None:
    write_scalars(tmp_path / "r", {"x": {10: 1.0, 9: 2.0, 100: 3.0, 1: 4.0}})
    assert list(tb_dump.dump_tb_logs(tmp_path).metrics["x"]) == ["1", "9", "10", "100"]


def test_later_file_wins_and_conflicts_are_listed(tmp_path: Path) -> None:
    # Written first: steps 1..5. A resume from step 3 writes 4..7 into a second file.
    write_scalars(
        tmp_path / "z_first", {"train/loss": {i: float(i) for i in range(1, 6)}}
    )
    write_scalars(
        tmp_path / "a_resumed", {"train/loss": {i: 100.0 + i for i in range(4, 8)}}
    )
    result = tb_dump.dump_tb_logs(tmp_path)
    # Ordered by first event wall time, not by name ("a_" sorts before "z_").
    assert [p.parent.name for p in result.files] == ["z_first", "a_resumed"]
    assert result.metrics["train/loss"] == {
        "1": 1.0,
        "2": 2.0,
        "3": 3.0,
        "4": 104.0,
        "5": 105.0,
        "6": 106.0,
        "7": 107.0,
    }
    assert [(c.metric, c.step, c.old, c.new) for c in result.conflicts] == [
        ("train/loss", 4, 4.0, 104.0),
        ("train/loss", 5, 5.0, 105.0),
    ]
    with pytest.raises(tb_dump.ConflictError, match="2 value"):
        tb_dump.dump_tb_logs(tmp_path, error_on_conflicts=True)


def test_order_uses_first_event_time_not_mtime(tmp_path: Path) -> None:
    first = write_scalars(tmp_path / "first", {"m": {1: 1.0}})
    second = write_scalars(tmp_path / "second", {"m": {1: 2.0}})
    # A copy or an archive extraction can make the older file look newer.
    now = time.time()
    os.utime(second, (now - 1000, now - 1000))
    os.utime(first, (now, now))
    assert tb_dump.find_event_files(tmp_path) == [first, second]
    assert tb_dump.dump_tb_logs(tmp_path).metrics["m"] == {"1": 2.0}


def test_no_event_files_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("no events here")
    with pytest.raises(tb_dump.NoEventFilesError, match="no TensorBoard event files"):
        tb_dump.dump_tb_logs(tmp_path)
    with pytest.raises(tb_dump.NoEventFilesError, match="log directory not found"):
        tb_dump.dump_tb_logs(tmp_path / "missing")


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(ENTRY), *args],
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_cli_writes_json_and_warns_on_conflicts(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    write_scalars(logs / "one", {"train/loss": {1: 3.0, 2: 2.0}})
    write_scalars(logs / "two", {"train/loss": {2: 1.0}})
    out = tmp_path / "out" / "metrics.json"
    proc = run_cli(str(logs), "--output_path", str(out))
    assert proc.returncode == 0, proc.stderr
    assert json.loads(out.read_text()) == {"train/loss": {"1": 3.0, "2": 1.0}}
    assert "warning: 1 value(s) logged more than once" in proc.stderr
    assert "train/loss step 2: 2.0" in proc.stderr
    # Atomic write: no temp file left behind.
    assert [p.name for p in out.parent.iterdir()] == ["metrics.json"]

    out.unlink()
    proc = run_cli(str(logs), "--output_path", str(out), "--error-on-conflicts")
    assert proc.returncode == 1
    assert "error:" in proc.stderr and "Traceback" not in proc.stderr
    assert not out.exists()


def test_cli_no_event_files_exits_non_zero(tmp_path: Path) -> None:
    proc = run_cli(str(tmp_path), "--output_path", str(tmp_path / "m.json"))
    assert proc.returncode != 0
    assert proc.stderr.strip().startswith("error: no TensorBoard event files")
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "m.json").exists()


def test_cli_output_feeds_check_metrics(tmp_path: Path) -> None:
    write_scalars(
        tmp_path / "logs", {"train/loss": {i: 10.0 / i for i in range(1, 11)}}
    )
    out = tmp_path / "metrics.json"
    assert run_cli(str(tmp_path / "logs"), "--output_path", str(out)).returncode == 0
    proc = subprocess.run(
        [
            sys.executable,
            str(REPO_ROOT / "tests" / "check_metrics.py"),
            str(out),
            'data["train/loss"]["10"] < 0.5 * data["train/loss"]["1"]',
            'mean(data["train/loss"], -3) < 2',
        ],
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
