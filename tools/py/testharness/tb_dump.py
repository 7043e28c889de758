"""TensorBoard event files -> `{"metric/name": {"<step>": value, ...}, ...}` JSON.

Every events file under the log directory is read (recursively) with TensorBoard's own
reader, loading every step (size guidance 0: no reservoir sampling). Files are merged
oldest first, so when two files hold the same metric at the same step (a run resumed
from a checkpoint re-logs the steps after it) the later file wins; the conflicts are
listed as a warning, or are an error with `error_on_conflicts`.

"Oldest" is the wall time of a file's first event (the file-version record written
when the writer opens it). It belongs to the file's content, so it survives copies,
`tar`, `rsync` without `-t` and artifact downloads, which all reset mtimes; the file's
mtime is only the fallback for an empty or unreadable file, and the path breaks ties.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# One atomic JSON writer for the harness (temp file + os.replace). NaN/inf stay as the
# JSON extensions NaN/Infinity, which Python's json reads, so a diverged run is visible
# to the checks instead of being silently dropped.
from testharness.check_metrics import write_json_atomic

__all__ = [
    "Conflict",
    "ConflictError",
    "DumpResult",
    "NoEventFilesError",
    "dump_tb_logs",
    "find_event_files",
    "main",
    "read_event_file",
    "write_json_atomic",
]

EVENTS_MARKER = "tfevents"


class NoEventFilesError(Exception):
    """The log directory holds no TensorBoard event file."""


class ConflictError(Exception):
    """Two event files hold different records of one metric at one step."""


@dataclass(frozen=True)
class Conflict:
    """One metric logged at one step by two files; `new` (from `new_file`) wins."""

    metric: str
    step: int
    old: float
    new: float
    old_file: str
    new_file: str

    def describe(self) -> str:
        return (
            f"{self.metric} step {self.step}: {self.old!r} ({self.old_file}) "
            f"-> {self.new!r} ({self.new_file})"
        )


@dataclass
class DumpResult:
    """Merged metrics plus what was read to get them."""

    metrics: dict[str, dict[str, float]]
    files: list[Path]
    conflicts: list[Conflict] = field(default_factory=list)


def is_event_file(path: Path) -> bool:
    """TensorBoard's naming: `events.out.tfevents.<time>.<host>...` (any prefix/suffix)."""
    return path.is_file() and EVENTS_MARKER in path.name


def _first_wall_time(path: Path) -> float | None:
    """Wall time of the file's first event, None when the file holds none."""
    from tensorboard.backend.event_processing import event_file_loader

    try:
        for event in event_file_loader.EventFileLoader(str(path)).Load():
            return float(event.wall_time)
    except Exception:  # noqa: BLE001 - a truncated or foreign file: order it by mtime instead
        return None
    return None


def find_event_files(log_dir: str | Path) -> list[Path]:
    """Every event file under log_dir (recursively), oldest first (see module doc)."""
    root = Path(log_dir)
    files = [p for p in root.rglob(f"*{EVENTS_MARKER}*") if is_event_file(p)]

    def key(p: Path) -> tuple[float, str]:
        t = _first_wall_time(p)
        return (t if t is not None else p.stat().st_mtime, str(p))

    return sorted(files, key=key)


def _scalar_from_tensor(tensor_proto: Any) -> float | None:
    from tensorboard.util import tensor_util

    arr = tensor_util.make_ndarray(tensor_proto)
    if arr.size != 1 or arr.dtype.kind not in "fiub":
        return None  # not a scalar (histograms, text, ...): not a metric
    return float(arr.reshape(()).item())


def read_event_file(path: str | Path) -> dict[str, dict[int, float]]:
    """{tag: {step: value}} of one events file: scalars and scalar tensors, every step.

    Within one file a step logged twice keeps its last value (TensorBoard's own order).
    """
    from tensorboard.backend.event_processing import event_accumulator as ea

    acc = ea.EventAccumulator(
        str(path),
        # 0 = keep everything: the default keeps a 10,000-point reservoir sample.
        size_guidance={ea.SCALARS: 0, ea.TENSORS: 0},
        # Keep every record: ordering across files is handled by the merge.
        purge_orphaned_data=False,
    )
    acc.Reload()
    out: dict[str, dict[int, float]] = {}
    tags = acc.Tags()
    for tag in tags.get(ea.SCALARS, []):
        series = out.setdefault(tag, {})
        for ev in acc.Scalars(tag):
            series[int(ev.step)] = float(ev.value)
    # Writers using the tensor summary format (tf.summary, tensorboard's own writer)
    # store scalars as 0-d tensors under the "scalars" plugin.
    for tag in tags.get(ea.TENSORS, []):
        plugin = acc.SummaryMetadata(tag).plugin_data.plugin_name
        if plugin not in ("scalars", ""):
            continue
        series = out.setdefault(tag, {})
        for tev in acc.Tensors(tag):
            v = _scalar_from_tensor(tev.tensor_proto)
            if v is not None:
                series[int(tev.step)] = v
        if not series:
            del out[tag]
    return out


def _same(a: float, b: float) -> bool:
    return a == b or (math.isnan(a) and math.isnan(b))


def merge(files: Iterable[Path], base: Path | None = None) -> DumpResult:
    """Read files in the given order; a later file overrides earlier values (recorded)."""
    files = list(files)
    merged: dict[str, dict[int, tuple[float, str]]] = {}
    conflicts: list[Conflict] = []
    for path in files:
        name = (
            str(path.relative_to(base))
            if base is not None and path.is_relative_to(base)
            else str(path)
        )
        for tag, series in read_event_file(path).items():
            dest = merged.setdefault(tag, {})
            for step, value in series.items():
                if step in dest:
                    old, old_name = dest[step]
                    # Logged twice by two files: the later file wins. Identical values are a
                    # conflict too: the step was logged twice, which a resume should explain.
                    conflicts.append(Conflict(tag, step, old, value, old_name, name))
                dest[step] = (value, name)
    metrics = {
        tag: {str(step): v for step, (v, _) in sorted(series.items())}
        for tag, series in sorted(merged.items())
    }
    return DumpResult(metrics=metrics, files=files, conflicts=conflicts)


def dump_tb_logs(log_dir: str | Path, error_on_conflicts: bool = False) -> DumpResult:
    """Read and merge every event file under log_dir. Raises NoEventFilesError/ConflictError."""
    root = Path(log_dir)
    if not root.exists():
        raise NoEventFilesError(f"log directory not found: {root}")
    if not root.is_dir():
        raise NoEventFilesError(f"not a directory: {root}")
    files = find_event_files(root)
    if not files:
        raise NoEventFilesError(
            f"no TensorBoard event files (*{EVENTS_MARKER}*) under {root}"
        )
    result = merge(files, base=root)
    if error_on_conflicts and result.conflicts:
        raise ConflictError(_conflict_text(result.conflicts, fatal=True))
    return result


def _conflict_text(
    conflicts: list[Conflict], limit: int = 20, fatal: bool = False
) -> str:
    outcome = "refused (--error-on-conflicts)" if fatal else "the later file wins"
    lines = [
        f"{len(conflicts)} value(s) logged more than once by different event files; {outcome}:"
    ]
    lines += [f"  {c.describe()}" for c in conflicts[:limit]]
    if len(conflicts) > limit:
        lines.append(f"  ... and {len(conflicts) - limit} more")
    return "\n".join(lines)


def _iter_summary(result: DumpResult) -> Iterator[str]:
    n_values = sum(len(s) for s in result.metrics.values())
    yield f"read {len(result.files)} event file(s): {len(result.metrics)} metric(s), {n_values} value(s)"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="json_dump_tb_logs.py",
        description="Dump every TensorBoard scalar under LOG_DIR to {metric: {step: value}} JSON.",
    )
    parser.add_argument(
        "log_dir",
        metavar="LOG_DIR",
        help="directory searched recursively for event files",
    )
    parser.add_argument(
        "--output_path",
        "--output-path",
        dest="output_path",
        required=True,
        metavar="OUT.json",
    )
    parser.add_argument(
        "--error-on-conflicts",
        action="store_true",
        help="fail when two event files log the same metric at the same step",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    """CLI: 0 on success, 1 when there is nothing to dump or a conflict is an error."""
    args = build_parser().parse_args(argv)
    try:
        result = dump_tb_logs(args.log_dir, error_on_conflicts=args.error_on_conflicts)
    except NoEventFilesError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except ConflictError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except Exception as exc:  # noqa: BLE001 - a corrupt file: one clear line, not a traceback
        print(
            f"error: cannot read TensorBoard logs under {args.log_dir}: {exc}",
            file=sys.stderr,
        )
        return 1
    if result.conflicts:
        print(f"warning: {_conflict_text(result.conflicts)}", file=sys.stderr)
    try:
        write_json_atomic(args.output_path, result.metrics)
    except OSError as exc:
        print(f"error: cannot write {args.output_path}: {exc}", file=sys.stderr)
        return 1
    for line in _iter_summary(result):
        print(f"{line} -> {args.output_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
