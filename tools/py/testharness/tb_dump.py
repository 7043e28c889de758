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

Every file is checked whole before it is read (`check_event_file`): TensorBoard's
reader stops without a word at the first record it cannot read, so a 0-byte or garbage
file would dump as nothing and a file cut short would lose its tail silently. A file
that is empty, not an event file, truncated (ends mid-record, or has bytes after its
last record that are not a record) or holds a record failing its CRC is an error
naming the file; `allow_truncated` keeps the records before the damage instead (a
file that a live run is still writing can end mid-record). A file that is not an
event file at all is an error either way.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

__all__ = [
    "BAD_CRC",
    "EMPTY",
    "NOT_EVENTS",
    "TRUNCATED",
    "Conflict",
    "ConflictError",
    "DamagedEventFilesError",
    "DumpResult",
    "EventFileCheck",
    "NoEventFilesError",
    "Problem",
    "check_event_file",
    "dump_tb_logs",
    "find_event_files",
    "read_event_file",
]

EVENTS_MARKER = "tfevents"

# What check_event_file can find wrong with a file (EventFileCheck.problem).
Problem = Literal["empty", "not an event file", "truncated", "bad CRC"]
EMPTY: Problem = "empty"
NOT_EVENTS: Problem = "not an event file"
TRUNCATED: Problem = "truncated"
BAD_CRC: Problem = "bad CRC"
# The problems that leave a good head of records: allow_truncated keeps that head.
TAIL_LOST = frozenset({EMPTY, TRUNCATED, BAD_CRC})

# tf_record framing, the format of an event file: every record is
#   uint64 length | uint32 masked CRC32C of those 8 bytes | data | uint32 masked CRC32C of data
# (little-endian). The data of the first record is an Event holding `file_version`.
_LENGTH = struct.Struct("<Q")
_CRC = struct.Struct("<I")
_HEADER_SIZE = _LENGTH.size + _CRC.size


class NoEventFilesError(Exception):
    """The log directory holds no TensorBoard event file."""


class ConflictError(Exception):
    """Two event files hold different records of one metric at one step."""


@dataclass(frozen=True)
class EventFileCheck:
    """What a walk over one event file's records found.

    `records` whole records with good CRCs start the file and end at byte `good_bytes`;
    `problem` is None for a whole event file, else what stopped the walk there.
    """

    path: Path
    size: int
    records: int
    good_bytes: int
    problem: Problem | None = None
    detail: str = ""

    @property
    def ok(self) -> bool:
        return self.problem is None

    @property
    def unread_bytes(self) -> int:
        return max(self.size - self.good_bytes, 0)

    @property
    def tail_lost(self) -> bool:
        """Damage after a good head (or an empty file): allow_truncated keeps the head."""
        return self.problem in TAIL_LOST

    def _what(self) -> str:
        if self.problem == EMPTY:
            return "empty (0 bytes)"
        if self.problem == NOT_EVENTS:
            return f"not a TensorBoard event file: {self.detail}"
        return f"{self.problem} after {self.records} records: {self.detail}"

    def describe(self, name: str | None = None) -> str:
        """One line for an error: the file, what is wrong, how much was not read."""
        line = f"{name or self.path}: {self._what()}"
        if self.problem in (TRUNCATED, BAD_CRC):
            line += f" ({self.unread_bytes} of {self.size} bytes unread)"
        return line

    def describe_kept(self, name: str | None = None) -> str:
        """One line for a warning: the damage, and what was kept in spite of it."""
        if self.problem == EMPTY:
            return f"{name or self.path}: {self._what()}: no records to keep"
        return (
            f"{name or self.path}: {self._what()}; kept the {self.records} records read, "
            f"lost the tail ({self.unread_bytes} of {self.size} bytes unread)"
        )


class DamagedEventFilesError(Exception):
    """Event files that are empty, not event files, truncated or fail a CRC."""

    def __init__(self, checks: list[EventFileCheck], base: Path, allow_truncated: bool = False) -> None:
        self.checks = checks
        self.allow_truncated = allow_truncated
        lines = [f"{len(checks)} damaged event file(s) under {base}:"]
        lines += [f"  {c.describe(display_name(c.path, base))}" for c in checks]
        super().__init__("\n".join(lines))

    @property
    def allow_truncated_would_help(self) -> bool:
        """Every refused file has a good head that allow_truncated would keep."""
        return not self.allow_truncated and all(c.tail_lost for c in self.checks)


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
        return f"{self.metric} step {self.step}: {self.old!r} ({self.old_file}) -> {self.new!r} ({self.new_file})"


@dataclass
class DumpResult:
    """Merged metrics plus what was read to get them."""

    metrics: dict[str, dict[str, float]]
    files: list[Path]
    conflicts: list[Conflict] = field(default_factory=list)
    # Damaged files read anyway (allow_truncated): only the head before the damage.
    damaged: list[EventFileCheck] = field(default_factory=list)
    # Every tag of the files, of any kind (scalars, tensors, histograms, images, audio, text):
    # what --require-tag-prefix looks at: every kind, not only scalars (issue 51).
    tags: frozenset[str] = frozenset()


def is_event_file(path: Path) -> bool:
    """TensorBoard's naming: `events.out.tfevents.<time>.<host>...` (any prefix/suffix)."""
    return path.is_file() and EVENTS_MARKER in path.name


def display_name(path: Path, base: Path | None) -> str:
    if base is not None and path.is_relative_to(base):
        return str(path.relative_to(base))
    return str(path)


def _not_a_file_version_event(data: bytes) -> str | None:
    """Why a first record is not what every TensorBoard writer starts a file with."""
    from tensorboard.compat.proto import event_pb2

    try:
        event = event_pb2.Event.FromString(data)
    except Exception:  # noqa: BLE001 - protobuf's DecodeError: these bytes are no Event
        return "its first record is not an Event protobuf"
    if not event.HasField("file_version"):
        return "its first record is not an Event with file_version (writers start every file with one)"
    return None


def check_event_file(path: str | Path) -> EventFileCheck:
    """Walk the records of one event file: is it whole, and if not, where does it stop?

    The framing is walked here, not by TensorBoard's reader, because the reader cannot
    say: its loaders (EventFileLoader, the EventAccumulator) take a record that fails to
    read for "not written yet" and stop silently, and its record reader tells truncation
    from a bad CRC only in an exception's text, never where in the file it stopped. The
    checksum is TensorBoard's own masked CRC32C; decoding stays with its reader.
    """
    from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import masked_crc32c

    path = Path(path)
    records = good = 0
    problem: Problem | None = None
    detail = ""
    with path.open("rb") as f:
        while True:
            header = f.read(_HEADER_SIZE)
            if not header:
                break  # the last record ended exactly at the end of the file
            size = os.fstat(f.fileno()).st_size
            if len(header) < _HEADER_SIZE:
                problem, detail = TRUNCATED, "the file ends mid-record"
                break
            (length,) = _LENGTH.unpack_from(header)
            (length_crc,) = _CRC.unpack_from(header, _LENGTH.size)
            if masked_crc32c(header[: _LENGTH.size]) != length_crc:
                # A length whose CRC fails cannot be trusted: nothing after it can be framed.
                if records == 0:
                    problem = NOT_EVENTS
                    detail = "it does not start with a record (the length's CRC fails)"
                else:
                    problem = TRUNCATED
                    detail = f"the bytes after the last record (from byte {good}) are not a record"
                break
            if length + _CRC.size > size - good - _HEADER_SIZE:
                problem, detail = TRUNCATED, "the file ends mid-record"
                break
            data = f.read(length)
            data_crc = f.read(_CRC.size)
            if len(data) < length or len(data_crc) < _CRC.size:  # shrank while read
                problem, detail = TRUNCATED, "the file ends mid-record"
                break
            if masked_crc32c(data) != _CRC.unpack(data_crc)[0]:
                problem = BAD_CRC
                detail = f"record {records + 1} (at byte {good}) fails its data CRC"
                break
            if records == 0:
                why = _not_a_file_version_event(data)
                if why is not None:
                    problem, detail = NOT_EVENTS, why
                    break
            records += 1
            good = f.tell()
        # Measured last: a file that a live run is still writing may have grown since.
        size = os.fstat(f.fileno()).st_size
    if size == 0:
        problem, detail = EMPTY, ""
    return EventFileCheck(path, size, records, good, problem, detail)


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
    return _read_event_file(path)[0]


def _read_event_file(path: str | Path) -> tuple[dict[str, dict[int, float]], set[str]]:
    """read_event_file's metrics, and every tag of the file whatever its kind."""
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
    # Tags() maps each kind to its tags, and `graph`/`meta_graph` to a flag: the lists only.
    every_tag = {tag for names in tags.values() if isinstance(names, list) for tag in names}
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
    return out, every_tag


def merge(files: Iterable[Path], base: Path | None = None) -> DumpResult:
    """Read files in the given order; a later file overrides earlier values (recorded)."""
    files = list(files)
    merged: dict[str, dict[int, tuple[float, str]]] = {}
    conflicts: list[Conflict] = []
    tags: set[str] = set()
    for path in files:
        name = display_name(path, base)
        metrics_of_file, tags_of_file = _read_event_file(path)
        tags |= tags_of_file
        for tag, series in metrics_of_file.items():
            dest = merged.setdefault(tag, {})
            for step, value in series.items():
                if step in dest:
                    old, old_name = dest[step]
                    # Logged twice by two files: the later file wins. Identical values are a
                    # conflict too: the step was logged twice, which a resume should explain.
                    conflicts.append(Conflict(tag, step, old, value, old_name, name))
                dest[step] = (value, name)
    metrics = {tag: {str(step): v for step, (v, _) in sorted(series.items())} for tag, series in sorted(merged.items())}
    return DumpResult(metrics=metrics, files=files, conflicts=conflicts, tags=frozenset(tags))


def conflict_text(conflicts: list[Conflict], limit: int = 20, fatal: bool = False) -> str:
    outcome = "refused (--error-on-conflicts)" if fatal else "the later file wins"
    lines = [f"{len(conflicts)} value(s) logged more than once by different event files; {outcome}:"]
    lines += [f"  {c.describe()}" for c in conflicts[:limit]]
    if len(conflicts) > limit:
        lines.append(f"  ... and {len(conflicts) - limit} more")
    return "\n".join(lines)


def dump_tb_logs(log_dir: str | Path, error_on_conflicts: bool = False, allow_truncated: bool = False) -> DumpResult:
    """Check, read and merge every event file under log_dir.

    Raises NoEventFilesError, ConflictError, or DamagedEventFilesError for a damaged
    file; with allow_truncated a file whose tail is lost is read up to the damage and
    listed in `DumpResult.damaged` (a file that is not an event file still raises).
    """
    root = Path(log_dir)
    if not root.exists():
        raise NoEventFilesError(f"log directory not found: {root}")
    if not root.is_dir():
        raise NoEventFilesError(f"not a directory: {root}")
    files = find_event_files(root)
    if not files:
        raise NoEventFilesError(f"no TensorBoard event files (*{EVENTS_MARKER}*) under {root}")
    damaged = [c for c in map(check_event_file, files) if not c.ok]
    refused = [c for c in damaged if not (allow_truncated and c.tail_lost)]
    if refused:
        raise DamagedEventFilesError(refused, root, allow_truncated)
    result = merge(files, base=root)
    result.damaged = damaged
    if error_on_conflicts and result.conflicts:
        raise ConflictError(conflict_text(result.conflicts, fatal=True))
    return result
