"""`testharness tb-dump` and tests/json_dump_tb_logs.py: the command line over tb_dump's reader."""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path

from testharness.atomic_io import json_text, write_json_atomic
from testharness.tb_dump import (
    EVENTS_MARKER,
    NOT_EVENTS,
    ConflictError,
    DamagedEventFilesError,
    DumpResult,
    NoEventFilesError,
    conflict_text,
    display_name,
    dump_tb_logs,
)


def _iter_summary(result: DumpResult) -> Iterator[str]:
    n_values = sum(len(s) for s in result.metrics.values())
    damaged = f" ({len(result.damaged)} damaged, read up to the damage)" if result.damaged else ""
    yield (f"read {len(result.files)} event file(s){damaged}: {len(result.metrics)} metric(s), {n_values} value(s)")


def _damage_hints(exc: DamagedEventFilesError) -> Iterator[str]:
    if any(c.tail_lost for c in exc.checks) and not exc.allow_truncated:
        yield (
            "a run that is still writing its event file can leave it ending mid-record: "
            "dump after the run has ended, or pass --allow-truncated to keep the records "
            "before the damage (one warning per file)"
        )
    if any(c.problem == NOT_EVENTS for c in exc.checks):
        yield (
            f"every file named *{EVENTS_MARKER}* under LOG_DIR is read: "
            "move the files that are not TensorBoard event files out of it"
        )


def missing_prefixes(tags: Iterable[str], prefixes: Iterable[str]) -> list[str]:
    """The prefixes (in the order given, once each) that no tag starts with."""
    names = list(tags)
    return [p for p in dict.fromkeys(prefixes) if not any(n.startswith(p) for n in names)]


def missing_prefix_text(missing: list[str], tags: Iterable[str], log_dir: str, limit: int = 10) -> str:
    """`No TensorBoard tag starts with 'gen/' under LOG_DIR`, then the tags that are there."""
    names = sorted(tags)
    found = ", ".join(names[:limit]) + (f", ... ({len(names)} in all)" if len(names) > limit else "")
    wanted = " or ".join(repr(p) for p in missing)
    return (
        f"No TensorBoard tag starts with {wanted} under {log_dir} (--require-tag-prefix); tags found: {found or 'none'}"
    )


def merge_tb_logs_to_json(
    log_dir: str, output_path: str | None, error_on_conflicts: bool = False, required_tag_prefix: str | None = None
) -> None:
    """The function upstream's json_dump_tb_logs.py exports, for code and tests written against
    it (its signature at the last upstream version seen here, plus `required_tag_prefix`): the
    metrics of every event file under `log_dir` to `output_path` (nothing written without one).
    Raises FileNotFoundError without event files; ValueError for two files holding different
    values of a metric at a step (`error_on_conflicts`) or for a `required_tag_prefix` that no
    tag of any kind starts with. A damaged event file raises DamagedEventFilesError (upstream's
    reader stops at the damage)."""
    try:
        result = dump_tb_logs(log_dir)
    except NoEventFilesError:
        raise FileNotFoundError(f"No TensorBoard event files found under {log_dir}") from None
    # upstream refuses a step logged twice only when the values differ (NaN twice is the same)
    differing = [c for c in result.conflicts if not (c.old == c.new or (math.isnan(c.old) and math.isnan(c.new)))]
    if error_on_conflicts and differing:
        c = differing[0]
        raise ValueError(
            f"Conflict detected for metric '{c.metric}' at step {c.step}:\n"
            f"  {c.old_file} has value {c.old}\n  {c.new_file} has value {c.new}\n"
            "Re-run without --error-on-conflicts to merge with the latest value."
        )
    if required_tag_prefix is not None and missing_prefixes(result.tags, [required_tag_prefix]):
        raise ValueError(f"No TensorBoard tag starts with '{required_tag_prefix}' under {log_dir}")
    if output_path:
        write_json_atomic(output_path, result.metrics, allow_nan=True)


DESCRIPTION = "Dump every TensorBoard scalar under LOG_DIR to {metric: {step: value}} JSON."
EPILOG = (
    "Without --output_path the JSON goes to stdout (the summary line to stderr). "
    "Exit status: 0 when the JSON is written; 1 when there are no event files, a "
    "--require-tag-prefix matches no tag, a conflict is refused, or the JSON cannot "
    "be written; 2 when an event file is damaged (nothing is written, a previous "
    "OUT.json is left as it was)."
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "log_dir",
        metavar="LOG_DIR",
        help="directory searched recursively for event files",
    )
    parser.add_argument(
        "--output_path",
        "--output-path",
        dest="output_path",
        default=None,
        metavar="OUT.json",
        help="write the JSON here (atomically; folders are made); default: print it to stdout",
    )
    parser.add_argument(
        "--require-tag-prefix",
        dest="require_tag_prefix",
        action="append",
        default=[],
        metavar="PREFIX",
        help=(
            "fail (exit 1, nothing written) unless some TensorBoard tag of any kind (scalar, "
            "histogram, text, image, ...) starts with PREFIX, e.g. train/ to catch a run that "
            "never logged a training step; repeatable: each PREFIX must match"
        ),
    )
    conflicts = parser.add_mutually_exclusive_group()
    conflicts.add_argument(
        "--error-on-conflicts",
        action="store_true",
        help="fail when two event files log the same metric at the same step",
    )
    conflicts.add_argument(
        "--allow-conflicts",
        action="store_true",
        help="the default (the later file wins, with a warning); accepted for upstream's scripts",
    )
    parser.add_argument(
        "--allow-truncated",
        action="store_true",
        help=(
            "read event files whose tail is lost up to the damage: a file that ends "
            "mid-record (as one that a live run is still writing can), has bytes after "
            "its last record that are not a record, holds a record failing its CRC, or "
            "is empty. Each gets a warning with the records kept and the bytes left "
            "unread, and the JSON is written. Without this flag such a file is an error "
            "(exit 2). A file that is not an event file is an error either way."
        ),
    )


def build_parser(prog: str = "json_dump_tb_logs.py") -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=prog, description=DESCRIPTION, epilog=EPILOG)
    add_arguments(parser)
    return parser


def main(argv: list[str] | None = None) -> int:
    """The command on its own (tests/json_dump_tb_logs.py)."""
    return run(build_parser().parse_args(argv))


def run(args: argparse.Namespace) -> int:
    """0 written; 1 nothing to dump, a refused conflict, or a failed write; 2 a damaged file."""
    try:
        result = dump_tb_logs(
            args.log_dir,
            error_on_conflicts=args.error_on_conflicts,
            allow_truncated=args.allow_truncated,
        )
    except DamagedEventFilesError as exc:
        print(f"error: {exc}", file=sys.stderr)
        for hint in _damage_hints(exc):
            print(f"hint: {hint}", file=sys.stderr)
        return 2
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
    root = Path(args.log_dir)
    for check in result.damaged:
        print(
            f"warning: {check.describe_kept(display_name(check.path, root))}",
            file=sys.stderr,
        )
    if result.conflicts:
        print(f"warning: {conflict_text(result.conflicts)}", file=sys.stderr)
    missing = missing_prefixes(result.tags, args.require_tag_prefix)
    if missing:
        print(f"error: {missing_prefix_text(missing, result.tags, args.log_dir)}", file=sys.stderr)
        return 1
    if args.output_path is None:
        sys.stdout.write(json_text(result.metrics, allow_nan=True))
        for line in _iter_summary(result):
            print(line, file=sys.stderr)
        return 0
    try:
        # NaN/inf stay as the JSON extensions NaN/Infinity, which Python's json reads, so a
        # diverged run is visible to the checks instead of being silently dropped.
        write_json_atomic(args.output_path, result.metrics, allow_nan=True)
    except OSError as exc:
        print(f"error: cannot write {args.output_path}: {exc}", file=sys.stderr)
        return 1
    for line in _iter_summary(result):
        print(f"{line} -> {args.output_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
