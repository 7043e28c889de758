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
    write_scalars(tmp_path / "z_first", {"train/loss": {i: float(i) for i in range(1, 6)}})
    write_scalars(tmp_path / "a_resumed", {"train/loss": {i: 100.0 + i for i in range(4, 8)}})
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
    write_scalars(tmp_path / "logs", {"train/loss": {i: 10.0 / i for i in range(1, 11)}})
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


# --- damaged event files: empty, not an event file, truncated, trailing junk, bad CRC ---
#
# TensorBoard's own loaders stop silently at the first damaged record, so before this
# check a 0-byte or garbage file dumped as {} and a file cut in half lost its tail
# without a word. Every case below is a real SummaryWriter file, then damaged.

N_VALUES = 50


def write_run(log_dir: Path) -> Path:
    """A real 50-value run: one file_version record + one record per value."""
    return write_scalars(log_dir, {"train/loss": {i: 1.0 / (i + 1) for i in range(N_VALUES)}})


def record_ends(path: Path) -> list[int]:
    """Byte offset where each record ends, from TensorBoard's own record reader (oracle)."""
    from tensorboard.backend.event_processing import event_file_loader

    ends, offset = [], 0
    for record in event_file_loader.RawEventFileLoader(str(path)).Load():
        offset += 8 + 4 + len(record) + 4  # length, length CRC, data, data CRC
        ends.append(offset)
    return ends


def truncate_at_half(path: Path) -> tuple[int, int]:
    """Cut the file at half its size; (whole records left, bytes after them)."""
    ends = record_ends(path)
    assert len(ends) == N_VALUES + 1 and ends[-1] == path.stat().st_size
    half = path.stat().st_size // 2
    path.write_bytes(path.read_bytes()[:half])
    whole = [e for e in ends if e <= half]
    assert half not in ends  # mid-record, so the cut is a real truncation
    return len(whole), half - whole[-1]


def test_clean_file_checks_ok(tmp_path: Path) -> None:
    path = write_run(tmp_path / "run")
    check = tb_dump.check_event_file(path)
    assert check.problem is None and check.ok
    assert check.records == N_VALUES + 1
    assert check.good_bytes == check.size == path.stat().st_size
    assert check.unread_bytes == 0
    result = tb_dump.dump_tb_logs(tmp_path)
    assert result.damaged == [] and len(result.metrics["train/loss"]) == N_VALUES


def test_empty_file_is_an_error(tmp_path: Path) -> None:
    write_run(tmp_path / "good")
    empty = tmp_path / "crashed" / "events.out.tfevents.1.host"
    empty.parent.mkdir()
    empty.touch()
    check = tb_dump.check_event_file(empty)
    assert (check.problem, check.records, check.size) == (tb_dump.EMPTY, 0, 0)
    with pytest.raises(tb_dump.DamagedEventFilesError) as info:
        tb_dump.dump_tb_logs(tmp_path)
    assert "crashed/events.out.tfevents.1.host: empty (0 bytes)" in str(info.value)
    assert info.value.allow_truncated_would_help
    # The flag keeps the good file's values and reports the empty one.
    result = tb_dump.dump_tb_logs(tmp_path, allow_truncated=True)
    assert len(result.metrics["train/loss"]) == N_VALUES
    assert [c.path for c in result.damaged] == [empty]


@pytest.mark.parametrize(
    "content",
    [
        pytest.param(bytes(range(256)) * 4, id="garbage"),
        pytest.param(b'{"train/loss": {"1": 0.5}}\n' * 3, id="json-named-tfevents"),
    ],
)
def test_garbage_is_not_an_event_file_even_with_the_flag(tmp_path: Path, content: bytes) -> None:
    bad = tmp_path / "events.out.tfevents.2.host"
    bad.write_bytes(content)
    check = tb_dump.check_event_file(bad)
    assert check.problem == tb_dump.NOT_EVENTS and check.records == 0
    assert check.unread_bytes == len(content)
    for allow in (False, True):
        with pytest.raises(tb_dump.DamagedEventFilesError) as info:
            tb_dump.dump_tb_logs(tmp_path, allow_truncated=allow)
        assert "events.out.tfevents.2.host: not a TensorBoard event file" in str(info.value)
        assert not info.value.allow_truncated_would_help


def test_first_record_must_be_a_file_version_event(tmp_path: Path) -> None:
    # Valid tf_record framing (TensorBoard's own RecordWriter), but not an event file.
    from tensorboard.compat.proto import event_pb2
    from tensorboard.summary.writer.record_writer import RecordWriter

    path = tmp_path / "events.out.tfevents.3.host"
    with path.open("wb") as f:
        writer = RecordWriter(f)
        writer.write(event_pb2.Event(step=1, wall_time=1.0).SerializeToString())
        writer.write(b"\xff\xfe not a protobuf")
    check = tb_dump.check_event_file(path)
    assert check.problem == tb_dump.NOT_EVENTS
    assert "file_version" in check.detail


def test_truncated_at_half_is_an_error_naming_the_file(tmp_path: Path) -> None:
    path = write_run(tmp_path / "run")
    records, left_over = truncate_at_half(path)
    check = tb_dump.check_event_file(path)
    assert (check.problem, check.records) == (tb_dump.TRUNCATED, records)
    assert check.unread_bytes == left_over > 0
    assert "ends mid-record" in check.detail
    with pytest.raises(tb_dump.DamagedEventFilesError) as info:
        tb_dump.dump_tb_logs(tmp_path)
    message = str(info.value)
    assert f"{path.relative_to(tmp_path)}: truncated after {records} records" in message
    assert f"{left_over} of {path.stat().st_size} bytes unread" in message


def test_allow_truncated_keeps_the_head_and_reports_the_lost_tail(
    tmp_path: Path,
) -> None:
    path = write_run(tmp_path / "run")
    records, left_over = truncate_at_half(path)
    result = tb_dump.dump_tb_logs(tmp_path, allow_truncated=True)
    # Every whole record after the file_version one is a value; none is invented.
    series = result.metrics["train/loss"]
    assert list(series) == [str(i) for i in range(records - 1)]
    assert 0 < len(series) < N_VALUES
    (damaged,) = result.damaged
    assert (damaged.path, damaged.records, damaged.unread_bytes) == (
        path,
        records,
        left_over,
    )


def test_trailing_junk_is_truncation(tmp_path: Path) -> None:
    path = write_run(tmp_path / "run")
    size = path.stat().st_size
    for junk in (b"\x00" * 4096, b"partial", b"x" * 40):
        path.write_bytes(path.read_bytes()[:size] + junk)
        check = tb_dump.check_event_file(path)
        assert (check.problem, check.records) == (tb_dump.TRUNCATED, N_VALUES + 1), junk
        assert (check.good_bytes, check.unread_bytes) == (size, len(junk))
        with pytest.raises(tb_dump.DamagedEventFilesError, match="truncated after 51 records"):
            tb_dump.dump_tb_logs(tmp_path)
        kept = tb_dump.dump_tb_logs(tmp_path, allow_truncated=True).metrics
        assert len(kept["train/loss"]) == N_VALUES


def test_bad_crc_in_a_middle_record(tmp_path: Path) -> None:
    path = write_run(tmp_path / "run")
    ends = record_ends(path)
    data = bytearray(path.read_bytes())
    data[ends[21] - 5] ^= 0xFF  # the last data byte of record 22 (1-based)
    path.write_bytes(bytes(data))
    check = tb_dump.check_event_file(path)
    assert (check.problem, check.records, check.good_bytes) == (
        tb_dump.BAD_CRC,
        21,
        ends[20],
    )
    assert f"record 22 (at byte {ends[20]})" in check.detail
    with pytest.raises(tb_dump.DamagedEventFilesError, match="bad CRC"):
        tb_dump.dump_tb_logs(tmp_path)
    kept = tb_dump.dump_tb_logs(tmp_path, allow_truncated=True).metrics["train/loss"]
    assert list(kept) == [str(i) for i in range(20)]


def test_cli_damaged_file_exits_2_and_keeps_the_previous_output(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    path = write_run(logs / "run")
    records, left_over = truncate_at_half(path)
    out = tmp_path / "metrics.json"
    out.write_text('{"previous": {"1": 1.0}}\n')
    proc = run_cli(str(logs), "--output_path", str(out))
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    assert proc.stderr.startswith("error: 1 damaged event file(s) under")
    assert f"run/{path.name}: truncated after {records} records" in proc.stderr
    assert "still writing" in proc.stderr and "--allow-truncated" in proc.stderr
    assert out.read_text() == '{"previous": {"1": 1.0}}\n'  # untouched
    assert sorted(p.name for p in tmp_path.iterdir()) == ["logs", "metrics.json"]

    proc = run_cli(str(logs), "--output_path", str(out), "--allow-truncated")
    assert proc.returncode == 0, proc.stderr
    assert f"warning: run/{path.name}: truncated after {records} records" in proc.stderr
    assert (
        f"kept the {records} records read, lost the tail ({left_over} of {path.stat().st_size} bytes unread)"
    ) in proc.stderr
    assert len(json.loads(out.read_text())["train/loss"]) == records - 1


def test_cli_garbage_and_empty_files_exit_2_without_output(tmp_path: Path) -> None:
    (tmp_path / "events.out.tfevents.0.empty").touch()
    (tmp_path / "events.out.tfevents.0.junk").write_bytes(b"\x13\x37" * 100)
    out = tmp_path / "out.json"
    proc = run_cli(str(tmp_path), "--output_path", str(out))
    assert proc.returncode == 2, proc.stderr
    assert "error: 2 damaged event file(s)" in proc.stderr
    assert "events.out.tfevents.0.empty: empty (0 bytes)" in proc.stderr
    assert "events.out.tfevents.0.junk: not a TensorBoard event file" in proc.stderr
    assert not out.exists()
    # The flag accepts the empty file, never the one that is not an event file.
    proc = run_cli(str(tmp_path), "--output_path", str(out), "--allow-truncated")
    assert proc.returncode == 2, proc.stderr
    assert "error: 1 damaged event file(s)" in proc.stderr
    assert "events.out.tfevents.0.junk: not a TensorBoard event file" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not out.exists()


def test_cli_help_documents_the_flag() -> None:
    proc = run_cli("--help")
    assert proc.returncode == 0
    assert "--allow-truncated" in proc.stdout and "mid-record" in proc.stdout


def test_missing_prefixes_in_the_order_given_once_each() -> None:
    from testharness.tb_dump_cli import missing_prefixes

    names = {"train/loss", "val/loss"}
    assert missing_prefixes(names, []) == []
    assert missing_prefixes(names, ["train/", "val/"]) == []
    assert missing_prefixes(names, ["gen/", "train/", "eval/", "gen/"]) == ["gen/", "eval/"]


def test_cli_without_output_path_prints_the_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Upstream's --output_path is optional too; here the JSON then goes to stdout, for jq.
    from testharness.tb_dump_cli import main

    write_scalars(tmp_path / "logs", {"train/loss": {1: 2.0, 2: 1.0}})
    assert main([str(tmp_path / "logs")]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out) == {"train/loss": {"1": 2.0, "2": 1.0}}
    assert err.startswith("read 1 event file(s): 1 metric(s), 2 value(s)")
    assert list(tmp_path.iterdir()) == [tmp_path / "logs"]


def test_cli_require_tag_prefix(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from testharness.tb_dump_cli import main

    write_scalars(tmp_path / "logs", {"train/loss": {1: 2.0}, "val/loss": {1: 3.0}})
    out = tmp_path / "metrics.json"
    logs = str(tmp_path / "logs")
    prefixes = ["--require-tag-prefix", "train/", "--require-tag-prefix", "gen/", "--require-tag-prefix", "eval/"]
    assert main([logs, "--output_path", str(out), *prefixes]) == 1
    # the sentence names every missing prefix, then the tags there are
    assert capsys.readouterr().err.splitlines() == [
        f"error: No TensorBoard tag starts with 'gen/' or 'eval/' under {logs} (--require-tag-prefix); "
        "tags found: train/loss, val/loss"
    ]
    assert not out.exists()
    assert main([logs, "--output_path", str(out), "--require-tag-prefix", "train/"]) == 0
    assert json.loads(out.read_text()) == {"train/loss": {"1": 2.0}, "val/loss": {"1": 3.0}}


@pytest.mark.parametrize("kind", ["histogram", "text", "image"])
def test_require_tag_prefix_counts_every_kind_of_tag(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], kind: str
) -> None:
    # Upstream's GRPO logs generation_metrics/* as histograms only: its scripts' check
    # `--require-tag-prefix generation_metrics/` looks at every tag, not only the scalars.
    from torch.utils.tensorboard import SummaryWriter

    from testharness.tb_dump_cli import main

    writer = SummaryWriter(str(tmp_path / "logs"))
    writer.add_scalar("train/loss", 2.0, 1)
    if kind == "histogram":
        writer.add_histogram("generation_metrics/histogram/isl", np.arange(10), 1)
    elif kind == "text":
        writer.add_text("generation_metrics/sample", "a response", 1)
    else:
        writer.add_image("generation_metrics/image", np.zeros((3, 4, 4)), 1)
    writer.close()
    out = tmp_path / "metrics.json"
    args = [str(tmp_path / "logs"), "--output_path", str(out), "--require-tag-prefix", "generation_metrics/"]
    assert main(args) == 0, capsys.readouterr().err
    assert json.loads(out.read_text()) == {"train/loss": {"1": 2.0}}  # the JSON holds the scalars only
    assert tb_dump.dump_tb_logs(tmp_path / "logs").tags >= {"train/loss"}


def test_require_tag_prefix_looks_across_every_event_file(tmp_path: Path) -> None:
    from testharness.tb_dump_cli import main

    write_scalars(tmp_path / "logs" / "train", {"train/loss": {1: 2.0}})
    write_scalars(tmp_path / "logs" / "gen", {"gen/len": {1: 5.0}})
    logs = str(tmp_path / "logs")
    assert main([logs, "--output_path", str(tmp_path / "m.json"), "--require-tag-prefix", "train/",
                 "--require-tag-prefix", "gen/"]) == 0  # fmt: skip


def test_cli_accepts_upstreams_allow_conflicts(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from testharness.tb_dump_cli import main

    write_scalars(tmp_path / "logs" / "one", {"train/loss": {1: 3.0}})
    write_scalars(tmp_path / "logs" / "two", {"train/loss": {1: 1.0}})
    assert main([str(tmp_path / "logs"), "--allow-conflicts"]) == 0  # upstream's old flag: the default here
    assert json.loads(capsys.readouterr().out) == {"train/loss": {"1": 1.0}}
    with pytest.raises(SystemExit) as exit_info:
        main([str(tmp_path / "logs"), "--allow-conflicts", "--error-on-conflicts"])
    assert exit_info.value.code == 2


def _upstream_function():  # as upstream's tests import it: tests/ on sys.path, then the module
    import importlib.util

    spec = importlib.util.spec_from_file_location("json_dump_tb_logs", ENTRY)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.merge_tb_logs_to_json


def test_upstreams_merge_tb_logs_to_json(tmp_path: Path) -> None:
    from torch.utils.tensorboard import SummaryWriter

    merge_tb_logs_to_json = _upstream_function()
    writer = SummaryWriter(str(tmp_path / "logs"))
    writer.add_scalar("train/loss", 2.0, 1)
    writer.add_histogram("generation_metrics/histogram/isl", np.arange(5), 1)
    writer.close()
    out = tmp_path / "metrics.json"
    merge_tb_logs_to_json(str(tmp_path / "logs"), str(out), required_tag_prefix="generation_metrics/")
    assert json.loads(out.read_text()) == {"train/loss": {"1": 2.0}}
    with pytest.raises(ValueError, match=r"^No TensorBoard tag starts with 'eval/' under "):
        merge_tb_logs_to_json(str(tmp_path / "logs"), None, required_tag_prefix="eval/")
    with pytest.raises(FileNotFoundError, match="No TensorBoard event files found under"):
        merge_tb_logs_to_json(str(tmp_path / "empty"), None)


def test_upstreams_function_refuses_only_conflicts_of_different_values(tmp_path: Path) -> None:
    merge_tb_logs_to_json = _upstream_function()
    write_scalars(tmp_path / "same" / "a", {"train/loss": {1: 3.0}})
    write_scalars(tmp_path / "same" / "b", {"train/loss": {1: 3.0}})
    merge_tb_logs_to_json(str(tmp_path / "same"), None, error_on_conflicts=True)  # a re-logged step: fine
    write_scalars(tmp_path / "differ" / "a", {"train/loss": {1: 3.0}})
    write_scalars(tmp_path / "differ" / "b", {"train/loss": {1: 1.0}})
    with pytest.raises(ValueError, match="Conflict detected for metric 'train/loss' at step 1"):
        merge_tb_logs_to_json(str(tmp_path / "differ"), None, error_on_conflicts=True)
