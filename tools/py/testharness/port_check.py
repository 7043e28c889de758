"""`testharness port-check`: does a test file brought over from another checkout (upstream's)
replace one of this project's?

A ported file keeps its place under the test root (`tests/unit/<same path>`), and the two
projects can have a test file at the same path: a plain `cp` then replaces this project's test
without a word, and its tests silently stop running. Before copying, name the files to bring
over; after copying, the scan finds what a copy replaced (git holds this project's version):

    testharness port-check UPSTREAM/tests/unit/x/test_a.py ...   where each goes; is one of ours there?
    testharness port-check [--since REF]                          test files a copy replaced since REF (HEAD)
    testharness port-check --fix ...                              keep each replacing copy as <name>_upstream.py
                                                                  and restore this project's file from REF

A file given is placed by the test root's path inside its own (`.../tests/unit/x/test_a.py` goes
to `tests/unit/x/test_a.py` here). The scan judges the test files that changed since REF: one is
*replaced* when more than half of the tests it had at REF are gone and most of its lines differ
(an edit keeps most of either). Exit 0: nothing of this project's in the way or replaced; 1: a
collision or a replaced file (each listed with what to do); 2: a usage problem (a path with no
test root in it, git unable to answer, an unknown REF).

Pure functions first (test names, the replaced rule, where a file goes, the verdicts); git is
reached through testharness.functional.tree.
"""

from __future__ import annotations

import argparse
import ast
import difflib
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from testharness.functional import tree
from testharness.project_root import find_project_root
from testharness.settings import SettingsError, is_within, load_settings

Kind = Literal["new", "identical", "collides", "replaced"]
PROBLEMS: frozenset[Kind] = frozenset({"collides", "replaced"})
SUFFIX = "_upstream"  # the name a ported file takes beside this project's file of the same name

DESCRIPTION = "Whether test files brought over from another checkout (upstream's) replace this project's."
EPILOG = (
    "Exit status: 0 nothing of this project's is in the way or replaced; 1 a collision or a "
    "replaced file (each listed with what to do); 2 a usage problem."
)


# ---------------------------------------------------------------- pure


def defined_tests(source: bytes) -> list[str]:
    """The tests a file defines as pytest collects them by default: top-level `test*`
    functions and `Test*` classes ([] for a file that does not parse)."""
    try:
        module = ast.parse(source)
    except (SyntaxError, ValueError):
        return []
    names = []
    for node in module.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("test"):
            names.append(node.name)
        elif isinstance(node, ast.ClassDef) and node.name.startswith("Test"):
            names.append(node.name)
    return names


def similarity(old: bytes, new: bytes) -> float:
    """The share of lines the two versions have in common, 0..1 (difflib's ratio)."""
    a = old.decode(errors="replace").splitlines()
    b = new.decode(errors="replace").splitlines()
    return difflib.SequenceMatcher(None, a, b, autojunk=False).ratio()


def replaced(old: bytes, new: bytes) -> bool:
    """Whether `new` replaced the test file `old` rather than edited it: more than half of
    old's tests are gone and fewer than half of the lines are common."""
    before = defined_tests(old)
    if not before:
        return False  # not a test file: nothing to judge by
    kept = set(before) & set(defined_tests(new))
    return len(kept) * 2 < len(before) and similarity(old, new) < 0.5


def destination(source: Path, root: Path, test_roots: Sequence[Path]) -> Path | None:
    """Where a file of another checkout goes here: the part of its path after the last run of
    a test root's path (`tests/unit`), under that test root; None when its path has none."""
    parts = source.absolute().parts
    for test_root in test_roots:
        try:
            wanted = test_root.relative_to(root).parts
        except ValueError:
            continue
        for start in range(len(parts) - len(wanted) - 1, -1, -1):
            if parts[start : start + len(wanted)] == wanted:
                return test_root.joinpath(*parts[start + len(wanted) :])
    return None


def side_name(path: Path) -> Path:
    """`x/test_a.py` -> `x/test_a_upstream.py`: the place for a ported file that collides."""
    return path.with_name(f"{path.stem}{SUFFIX}{path.suffix}")


@dataclass(frozen=True)
class Finding:
    kind: Kind
    path: str  # relative to the project root
    detail: str


def verdict(rel: str, upstream: bytes, here: bytes | None, at_ref: bytes | None, ref: str, test_file: bool) -> Finding:
    """What copying `upstream` to `rel` does, given the file there now (`here`) and at REF."""
    if here is None and at_ref is None:
        return Finding("new", rel, "no file of this project there: copy it")
    if here == upstream and (at_ref is None or at_ref == upstream):
        return Finding("identical", rel, "already here, the same content")
    if here == upstream:
        assert at_ref is not None
        return Finding("replaced", rel, _replaced_detail(rel, at_ref, ref))
    ours = here if here is not None else at_ref
    assert ours is not None
    tests = defined_tests(ours) if test_file else []
    what = f"this project's test file ({_count(tests)})" if tests else "this project's file"
    missing = " (deleted here, still in git)" if here is None else ""
    if test_file:
        advice = f"copy the upstream file as {side_name(Path(rel)).as_posix()}"
    else:
        advice = "keep this project's and bring what you need into it by hand"
    return Finding("collides", rel, f"is {what}{missing}: copying would replace it; {advice}")


def _count(tests: Sequence[str]) -> str:
    return f"{len(tests)} test" + ("" if len(tests) == 1 else "s")


def _replaced_detail(rel: str, ours: bytes, ref: str) -> str:
    tests = defined_tests(ours)
    shown = ", ".join(tests[:4]) + (", ..." if len(tests) > 4 else "")
    had = f" and its {_count(tests)} ({shown})" if tests else ""
    return (
        f"holds a copy that replaced this project's file{had} as of {ref}: "
        f"testharness port-check --fix {rel} keeps the copy as {side_name(Path(rel)).as_posix()} "
        f"and restores this project's file from {ref}"
    )


def is_test_file(path: Path) -> bool:
    return path.suffix == ".py" and (path.name.startswith("test_") or path.stem.endswith("_test"))


# ---------------------------------------------------------------- git and the files (adapter)


def check_files(
    sources: Sequence[Path], root: Path, test_roots: Sequence[Path], ref: str | None
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
        findings.append(verdict(rel, source.read_bytes(), here, at_ref, ref or "git", is_test_file(dest)))
    return findings, problems


def scan(root: Path, test_roots: Sequence[Path], ref: str) -> list[Finding]:
    """The test files under the test roots that a copy replaced since `ref` (see `replaced`)."""
    findings = []
    for rel in tree.changed_since(root, ref):
        path = root / rel
        if not is_test_file(path) or not path.is_file() or not any(is_within(path, r) for r in test_roots):
            continue
        ours = tree.content_at(root, ref, rel)
        if ours is not None and replaced(ours, path.read_bytes()):
            findings.append(Finding("replaced", rel, _replaced_detail(rel, ours, ref)))
    return findings


def fix(root: Path, finding: Finding, ref: str) -> tuple[bool, str]:
    """Keep the replacing copy beside this project's file and restore that file from `ref`:
    (done, the line that says so)."""
    path = root / finding.path
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


# ---------------------------------------------------------------- command line


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "files",
        nargs="*",
        type=Path,
        metavar="FILE",
        help="files of another checkout to bring over (e.g. ../RL/tests/unit/algorithms/test_grpo.py): "
        "where each goes here, and whether one of this project's files is there; "
        "without FILE: scan for test files a copy replaced since --since",
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
        help="for each replaced file: keep the copy as NAME_upstream.py beside it and restore "
        "this project's file (index and working tree) from --since",
    )


def run(args: argparse.Namespace) -> int:
    try:
        root = find_project_root(Path.cwd())
        settings = load_settings(root)
    except SettingsError as exc:
        print(f"port-check: error: {exc}", file=sys.stderr)
        return 2
    ref: str | None = args.since if tree.head(root) is not None else None
    findings: list[Finding] = []
    try:
        if ref is not None:
            tree.resolve(root, ref)  # an unknown REF is a usage problem, not "nothing there"
        if args.files:
            findings, problems = check_files(args.files, root, settings.test_roots, ref)
        elif ref is None:
            problems = [f"{root} is not a git checkout with a commit: name the files to bring over"]
        else:
            findings, problems = scan(root, settings.test_roots, ref), []
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
    if not left:
        print("port-check: no file of this project is in the way or replaced")
        return 0
    collisions, gone = sum(f.kind == "collides" for f in left), sum(f.kind == "replaced" for f in left)
    counts = ", ".join(
        text
        for n, text in ((collisions, f"{collisions} collision{'s' * (collisions != 1)}"), (gone, f"{gone} replaced"))
        if n
    )
    print(f"port-check: {counts} (see above)", file=sys.stderr)
    return 1
