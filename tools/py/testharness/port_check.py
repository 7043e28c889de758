"""`testharness port-check`: does a file brought over from another checkout (upstream's)
replace one of this project's?

A ported file keeps its place under the test root (`tests/unit/<same path>`), and the two
projects can have a file at the same path: a plain `cp` then replaces this project's test, its
conftest.py, a package's `__init__.py`, the asset script or a helper without a word, and the
tests silently stop running (or every run fails on the conftest's import). Before copying,
name the files to bring over; after copying, the scan finds what a copy replaced (git holds
this project's version):

    testharness port-check UPSTREAM/tests/unit/x/test_a.py ...   where each goes; is one of ours there?
    testharness port-check [--since REF]                          files a copy replaced since REF (HEAD)
    testharness port-check --fix ...                              restore this project's files from REF,
                                                                  keeping each copy beside them (COVERED)

A file given is placed by the test root's path inside its own (`.../tests/unit/x/test_a.py` goes
to `tests/unit/x/test_a.py` here). The scan judges every file of this project under the test
roots that changed since REF (COVERED: what counts as replaced, and what --fix does, for each
kind of file), and the files the copy brought that name a renamed test file (an upstream
script's `--deselect tests/unit/x/test_a.py::test`: --fix points them at the copy). Exit 0:
nothing of this project's in the way or replaced, nothing left pointing at the wrong file;
1: a collision, a replaced file or such a reference (each listed with what to do); 2: a usage
problem (a path with no test root in it, git unable to answer, an unknown REF).

The rules are pure, in testharness.port_rules (test names, the replaced rule, where a file goes,
the verdicts, the references); git is reached through testharness.functional.tree.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from testharness.atomic_io import write_text_atomic
from testharness.functional import tree
from testharness.port_rules import (
    PROBLEMS,
    SUFFIX,
    Finding,
    covered,
    destination,
    is_test_file,
    refers_detail,
    replaced,
    replaced_detail,
    rewrite_references,
    role_of,
    side_name,
    verdict,
)
from testharness.project_root import find_project_root
from testharness.settings import SettingsError, is_within, load_settings

DESCRIPTION = "Whether files brought over from another checkout (upstream's) replace this project's."
EPILOG = (
    "Exit status: 0 nothing of this project's is in the way or replaced; 1 a collision, a "
    "replaced file or a reference to a renamed one (each listed with what to do); 2 a usage problem."
)


# ---------------------------------------------------------------- git and the files (adapter)


def check_files(
    sources: Sequence[Path], root: Path, test_roots: Sequence[Path], ref: str | None, assets_script: str | None = None
) -> tuple[list[Finding], list[str]]:
    """Findings for files of another checkout; and the usage problems (one line each)."""
    findings, problems = [], []
    for source in sources:
        if not source.is_file():
            problems.append(f"not a file: {source}")
            continue
        dest = destination(source, root, test_roots)
        if dest is None:
            roots = ", ".join(f"{r.relative_to(root).as_posix()}/" for r in test_roots if is_within(r, root))
            problems.append(f"cannot tell where {source} goes: its path has no {roots or 'test root'} in it")
            continue
        rel = dest.relative_to(root).as_posix()
        here = dest.read_bytes() if dest.is_file() else None
        at_ref = tree.content_at(root, ref, rel) if ref else None
        found = verdict(rel, source.read_bytes(), here, at_ref, ref or "git", is_test_file(dest), assets_script)
        findings.append(found)
    return findings, problems


MAX_SCANNED_BYTES = 1 << 20  # a script or list that names test files is far smaller


def scan(
    root: Path, test_roots: Sequence[Path], ref: str, assets_script: str | None = None
) -> tuple[list[Finding], dict[str, str]]:
    """The files of this project under the test roots that a copy replaced since `ref` (see
    `replaced`, COVERED), then the files the copy brought that name a renamed test file; and
    the renames (this project's test file -> the copy's place) those names were judged by."""
    findings: list[Finding] = []
    brought: list[str] = []
    for rel in tree.changed_since(root, ref):
        path = root / rel
        if not path.is_file() or not any(is_within(path, r) for r in test_roots):
            continue  # a deletion is not a copy
        ours = tree.content_at(root, ref, rel)
        if ours is None:
            brought.append(rel)
            continue
        role = role_of(rel, assets_script)
        if replaced(ours, path.read_bytes(), role):
            findings.append(Finding("replaced", rel, replaced_detail(rel, ours, ref, role), role))
    renamed = {f.path: side_name(Path(f.path)).as_posix() for f in findings if f.role == "test file"}
    for rel in brought:  # copies kept beside this project's test files by an earlier --fix
        path = Path(rel)
        if path.suffix == ".py" and path.stem.endswith(SUFFIX):
            original = path.with_name(path.stem.removesuffix(SUFFIX) + path.suffix).as_posix()
            if is_test_file(Path(original)) and tree.content_at(root, ref, original) is not None:
                renamed.setdefault(original, rel)
    roots = [r.relative_to(root).as_posix() for r in test_roots if is_within(r, root)]
    for rel in brought:
        text = _text_of(root / rel)
        if text is not None and renamed:
            _, counts = rewrite_references(text, renamed, roots)
            if counts:
                findings.append(Finding("refers", rel, refers_detail(counts), "helper"))
    return findings, renamed


def _text_of(path: Path) -> str | None:
    """A file the copy brought, as text, where it may name test files: not Python, not binary."""
    if path.suffix == ".py" or path.stat().st_size > MAX_SCANNED_BYTES:
        return None
    try:
        return path.read_bytes().decode()
    except UnicodeDecodeError:
        return None


def fix(root: Path, finding: Finding, ref: str) -> tuple[bool, str]:
    """Restore this project's file from `ref`, keeping the replacing copy beside it where
    COVERED says so: (done, the line that says so)."""
    path = root / finding.path
    if not covered(finding.role).keeps_copy:
        try:
            tree.restore(root, ref, finding.path)
        except tree.TreeError as exc:
            return False, f"not fixed: {finding.path}: {exc}"
        return True, f"fixed: {finding.path} restored from {ref}; the copy is not kept"
    side = side_name(path)
    copy = path.read_bytes()
    side_rel = side.relative_to(root).as_posix()
    if side.exists() and side.read_bytes() != copy:
        return False, f"not fixed: {finding.path}: {side_rel} exists already; move the copy yourself"
    side.write_bytes(copy)
    try:
        tree.restore(root, ref, finding.path)
    except tree.TreeError as exc:
        return False, f"not fixed: {finding.path}: {exc} (the copy is also in {side_rel})"
    return True, f"fixed: {finding.path} restored from {ref}; the copy is now {side_rel}"


def fix_references(root: Path, finding: Finding, renamed: dict[str, str], test_roots: Sequence[Path]) -> str | None:
    """Point the names of renamed test files in the file of `finding` at their copies: the line
    that says so (None when it names none of `renamed`)."""
    path = root / finding.path
    roots = [r.relative_to(root).as_posix() for r in test_roots if is_within(r, root)]
    text, counts = rewrite_references(path.read_bytes().decode(), renamed, roots)
    if not counts:
        return None
    mode = path.stat().st_mode
    write_text_atomic(path, text)
    path.chmod(mode)  # a script stays executable
    total = sum(counts.values())
    return (
        f"fixed: {finding.path}: {total} name{'s' * (total != 1)} of {len(counts)} renamed test "
        f"file{'s' * (len(counts) != 1)} now point{'s' * (total == 1)} at the {SUFFIX}.py copies"
    )


# ---------------------------------------------------------------- command line


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "files",
        nargs="*",
        type=Path,
        metavar="FILE",
        help="files of another checkout to bring over (e.g. ../RL/tests/unit/algorithms/test_grpo.py): "
        "where each goes here, and whether one of this project's files is there; "
        "without FILE: scan for files of this project (test files, conftest.py, __init__.py, the "
        "asset script, helpers) a copy replaced since --since",
    )
    parser.add_argument(
        "--since",
        metavar="REF",
        default="HEAD",
        help="the git revision that holds this project's files (default: HEAD; e.g. origin/main "
        "when the copy was committed on a branch)",
    )
    parser.add_argument(
        "--fix",
        action="store_true",
        help="restore each replaced file of this project (index and working tree) from --since, "
        "keeping the copy beside it as NAME_upstream.py (an __init__.py's copy is not kept), and "
        "point the names of renamed test files in the scripts the copy brought at those copies",
    )


def run(args: argparse.Namespace) -> int:
    try:
        root = find_project_root(Path.cwd())
        settings = load_settings(root)
    except SettingsError as exc:
        print(f"port-check: error: {exc}", file=sys.stderr)
        return 2
    assets = settings.assets_script
    assets_script = assets.relative_to(root).as_posix() if assets is not None and is_within(assets, root) else None
    ref: str | None = args.since if tree.head(root) is not None else None
    findings: list[Finding] = []
    renamed: dict[str, str] = {}
    try:
        if ref is not None:
            tree.resolve(root, ref)  # an unknown REF is a usage problem, not "nothing there"
        if args.files:
            findings, problems = check_files(args.files, root, settings.test_roots, ref, assets_script)
        elif ref is None:
            problems = [f"{root} is not a git checkout with a commit: name the files to bring over"]
        else:
            (findings, renamed), problems = scan(root, settings.test_roots, ref, assets_script), []
    except tree.TreeError as exc:
        problems = [str(exc)]
    for problem in problems:
        print(f"port-check: error: {problem}", file=sys.stderr)
    if problems:
        return 2
    left = []
    for finding in findings:
        kind = finding.kind.upper() if finding.kind in PROBLEMS else finding.kind
        print(f"port-check: {kind}: {finding.path} {finding.detail}")
        if finding.kind in PROBLEMS:
            left.append(finding)
    if args.fix and ref is not None:
        for finding in [f for f in left if f.kind == "replaced"]:
            done, line = fix(root, finding, ref)
            print(f"port-check: {line}", file=sys.stdout if done else sys.stderr)
            if done:
                left.remove(finding)
        unfixed = {f.path for f in left if f.kind == "replaced"}  # their names keep meaning the copy there
        renamed = {rel: side for rel, side in renamed.items() if rel not in unfixed}
        for finding in [f for f in left if f.kind == "refers"]:
            try:
                pointed = fix_references(root, finding, renamed, settings.test_roots)
            except (OSError, UnicodeDecodeError) as exc:
                print(f"port-check: not fixed: {finding.path}: {exc}", file=sys.stderr)
                continue
            if pointed is not None:
                print(f"port-check: {pointed}")
            left.remove(finding)  # (None: it names only files whose copy stays there, which it means)
    if not left:
        print("port-check: no file of this project is in the way or replaced")
        return 0
    counts = [
        f"{n} {text}{'s' * (n != 1 and text != 'replaced')}"
        for kind, text in (("collides", "collision"), ("replaced", "replaced"), ("refers", "file naming renamed tests"))
        if (n := sum(f.kind == kind for f in left))
    ]
    print(f"port-check: {', '.join(counts)} (see above)", file=sys.stderr)
    return 1
