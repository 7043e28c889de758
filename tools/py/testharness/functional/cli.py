"""`testharness functional ...`: what tests/functional/common.sh and run_all.sh call.

    testharness functional begin DIR                 the repository's state as a run starts
    testharness functional record NAME DIR --gpus N  after a passing run: what it reached
    testharness functional record NAME DIR --failed  after a failed run: run it again next time
    testharness functional plan --gpus N [--affected [--since REF]] [--shard I/N] SCRIPT...
                                                     one line per script: NAME<TAB>runs|skipped<TAB>reason
    testharness functional summary DIR --gpus N      run_all's rows (TSV on stdin) to $GITHUB_STEP_SUMMARY

DIR is the run's directory (tests/functional/<name>/reach): begin writes start.json there,
the run writes its coverage data (`coverage`) and the driver's reads (`reads.txt`).
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from dataclasses import replace
from pathlib import Path

from testharness import ci_report
from testharness.atomic_io import write_json_atomic
from testharness.project_root import find_project_root
from testharness.settings import Settings, SettingsError, load_settings
from testharness.shard_plan import ShardSpecError, parse_shard_spec, plan_shards
from testharness.state_files import one_line

from . import store, tree
from .reach import measured_lines, reach_of, repository_paths
from .select import Edit, Reader, Rules, SinceCommit, SinceRun, Verdict, judge

DESCRIPTION = "Record what functional scripts reach, and say which ones an edit affects (run_all.sh --affected)."
START, COVERAGE, READS = "start.json", "coverage", "reads.txt"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    begin = actions.add_parser("begin", help="note the repository's state as a run starts")
    begin.add_argument("dir", type=Path)
    record = actions.add_parser("record", help="record a finished run (what it reached, or that it failed)")
    record.add_argument("name")
    record.add_argument("dir", type=Path)
    record.add_argument("--gpus", type=int, default=0)
    record.add_argument("--failed", action="store_true", help="the run failed: it runs again until it passes")
    record.add_argument("--inputs", nargs="*", default=[], help="files the run read besides its driver's (the scripts)")
    summary = actions.add_parser("summary", help="append run_all's table (TSV rows on stdin) to $GITHUB_STEP_SUMMARY")
    summary.add_argument("functional_dir", type=Path)
    summary.add_argument("--gpus", default="0")
    plan_p = actions.add_parser("plan", help="which scripts run (--affected: which ones an edit affects; --shard)")
    plan_p.add_argument("scripts", nargs="+", type=Path)
    plan_p.add_argument("--gpus", type=int, default=0)
    plan_p.add_argument("--affected", action="store_true", help="only the scripts an edit can affect")
    plan_p.add_argument("--since", metavar="REF", help="with --affected: judge the edit since this git revision")
    plan_p.add_argument(
        "--shard", metavar="I/N", help="only shard I of N of the scripts that run, by recorded durations"
    )


def _rules(settings: Settings) -> Rules:
    f = settings.functional
    return Rules(f.source, f.environment, f.harness, f.unrelated)


def _reader(root: Path) -> Reader:
    def read(rel: str) -> bytes | None:
        try:
            return (root / rel).read_bytes()
        except OSError:
            return None

    return read


def _python() -> str:
    return platform.python_version()


def begin(root: Path, run_dir: Path) -> int:
    run_dir.mkdir(parents=True, exist_ok=True)
    try:
        state: dict[str, object] = {"files": tree.snapshot(root), "commit": tree.head(root), "started": time.time()}
    except tree.TreeError as exc:
        state = {"error": str(exc)}
    write_json_atomic(run_dir / START, state, compact=True)
    return 0


def record(settings: Settings, args: argparse.Namespace) -> int:
    root, path = settings.root, settings.functional.reach_file
    try:
        start = json.loads((args.dir / START).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        start = {"error": f"{START} is missing (the run did not start through functional_main)"}
    if args.failed:
        with store.updating(path) as records:
            old = records.get(args.name)
            records[args.name] = store.ScriptRecord(result=store.FAILED) if old is None else _failed(old)
        print(f"[functional] {args.name} failed: it runs under --affected until it passes")
        return 0
    if "error" in start:
        print(f"[functional] reach not recorded: {start['error']}")
        return 0
    files: dict[str, str] = start["files"]
    if not (args.dir / COVERAGE).is_file():
        print("[functional] reach not recorded: no coverage data (is coverage installed?)")
        return 0
    rules = _rules(settings)
    lines = {rel: n for rel, n in measured_lines(args.dir / COVERAGE, root).items() if rules.in_source(rel)}
    if not lines:
        where = ", ".join(rules.source) or "(none: set [tool.testharness] source_packages)"
        print(f"[functional] reach not recorded: coverage measured no file of the source packages: {where}")
        return 0
    try:
        reads = (args.dir / READS).read_text(encoding="utf-8", errors="surrogateescape").splitlines()
    except OSError:
        reads = []
    reach = reach_of(files, lines, _reader(root), rules)
    inputs = sorted(repository_paths([*reads, *args.inputs], root, files) - reach.keys())
    rec = store.ScriptRecord(
        result=store.PASSED,
        recorded_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        commit=start.get("commit"),
        duration_s=round(time.time() - float(start.get("started", time.time())), 1),
        gpus=args.gpus,
        python=_python(),
        files=files,
        inputs=inputs,
        reach=reach,
    )
    with store.updating(path) as records:
        records[args.name] = rec
    functions = sum(len(r.units) for r in reach.values())
    print(
        f"[functional] reach recorded in {path.name}: {functions} functions in {len(reach)} source files, "
        f"{len(inputs)} other files read"
    )
    return 0


def _failed(old: store.ScriptRecord) -> store.ScriptRecord:
    return replace(old, result=store.FAILED)


def verdicts(
    settings: Settings, names: list[str], gpus: int, since: str | None
) -> tuple[dict[str, Verdict], list[str]]:
    """The verdict of every named script, and the warning lines to print first."""
    root = settings.root
    records, warning = store.load(settings.functional.reach_file)
    notes = [warning] if warning else []
    read = _reader(root)
    edit: Edit
    try:
        if since is None:
            edit = SinceRun(tree.snapshot(root), read)
        else:
            commit = tree.resolve(root, since)
            edit = SinceCommit(tree.changed_since(root, commit), lambda rel: tree.content_at(root, commit, rel), read)
    except tree.UnknownRevision:
        raise
    except tree.TreeError as exc:
        reason = f"cannot tell what changed ({exc})"
        return {n: Verdict(True, reason) for n in names}, notes
    read_by_any = {p for r in records.values() for p in r.inputs}
    rules = _rules(settings)
    try:
        judged = {
            n: judge(records.get(n), edit, rules, read_by_any=read_by_any, gpus=gpus, python=_python()) for n in names
        }
    except Exception as exc:  # noqa: BLE001  records that break judging must not hide a script
        reason = f"the records could not be judged ({one_line(exc)})"  # each passing run replaces its own
        return {n: Verdict(True, reason) for n in names}, notes
    return judged, notes


def plan(settings: Settings, args: argparse.Namespace) -> int:
    names = [p.name.removesuffix(".sh") for p in args.scripts]
    if args.since is not None and not args.affected:
        print("error: --since REF goes with --affected", file=sys.stderr)
        return 2
    found: dict[str, Verdict] = {n: Verdict(True, "selected") for n in names}
    try:
        if args.affected:
            found, notes = verdicts(settings, names, args.gpus, args.since)
            for line in notes:
                print(f"warning: {line}", file=sys.stderr)
        if args.shard is not None:
            index, count = parse_shard_spec(args.shard)
            found = _sharded(settings, found, index, count)
    except tree.UnknownRevision as exc:
        print(f"error: --since: {exc}", file=sys.stderr)
        return 2
    except ShardSpecError as exc:
        print(f"error: --shard: {exc}", file=sys.stderr)
        return 2
    for name in names:
        v = found[name]
        print(f"{name}\t{'runs' if v.runs else 'skipped'}\t{v.reason}")
    return 0


def _sharded(settings: Settings, found: dict[str, Verdict], index: int, count: int) -> dict[str, Verdict]:
    """Shard `index` of `count` of the scripts that run, balanced by their recorded durations."""
    records, _ = store.load(settings.functional.reach_file)
    durations = {n: r.duration_s for n, r in records.items() if r.duration_s > 0}
    chosen = [n for n, v in found.items() if v.runs]
    shards = plan_shards(chosen, durations, count)
    out = dict(found)
    for shard in shards.shards:
        for name in shard.tests:
            if shard.index != index:
                out[name] = Verdict(False, f"shard {shard.index}/{count} runs it")
            else:
                out[name] = Verdict(True, f"{found[name].reason}; shard {index}/{count}")
    return out


def run(args: argparse.Namespace) -> int:
    try:
        settings = load_settings(find_project_root(Path.cwd()))
    except SettingsError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.action == "begin":
        return begin(settings.root, args.dir)
    if args.action == "record":
        return record(settings, args)
    if args.action == "summary":
        cells = [(line.split("\t") + ["", "", ""])[:4] for line in sys.stdin.read().splitlines() if line]
        rows = [(c[0], c[1], c[2], c[3]) for c in cells]
        try:  # never a hang (a FIFO) nor a traceback: the scripts' verdict is run_all.sh's
            ci_report.append_step_summary(ci_report.functional_markdown(rows, args.functional_dir, args.gpus))
        except (OSError, ValueError) as exc:
            print(f"warning: no step summary: ${ci_report.SUMMARY_ENV}: {exc}", file=sys.stderr)
        return 0
    return plan(settings, args)
