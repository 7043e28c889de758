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

Pure functions first (test names, the replaced rule, where a file goes, the verdicts, the
references); git is reached through testharness.functional.tree.
"""

from __future__ import annotations

import argparse
import ast
import difflib
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from testharness.atomic_io import write_text_atomic
from testharness.functional import tree
from testharness.project_root import find_project_root
from testharness.settings import SettingsError, is_within, load_settings

Kind = Literal["new", "identical", "collides", "replaced", "refers"]
PROBLEMS: frozenset[Kind] = frozenset({"collides", "replaced", "refers"})
SUFFIX = "_upstream"  # the name a ported file takes beside this project's file of the same name
Role = Literal["test file", "conftest", "package", "asset script", "helper"]

DESCRIPTION = "Whether files brought over from another checkout (upstream's) replace this project's."
EPILOG = (
    "Exit status: 0 nothing of this project's is in the way or replaced; 1 a collision, a "
    "replaced file or a reference to a renamed one (each listed with what to do); 2 a usage problem."
)


@dataclass(frozen=True)
class Covered:
    """One kind of file a copy can replace: how it is known, when it counts as replaced (rather
    than edited), and what --fix does."""

    role: Role
    names: str
    replaced_when: str
    fix: str
    keeps_copy: bool = True


# Every file of this project under a test root is one of these (docs/from-upstream.md's table
# of the copy-first flow is this list: tests/repo checks it).
COVERED: tuple[Covered, ...] = (
    Covered(
        "test file",
        "`test_*.py`, `*_test.py`",
        "more than half of its tests are gone and most of its lines differ",
        "restores this project's file; the copy is kept as `<name>_upstream.py` beside it, where pytest collects it",
    ),
    Covered(
        "conftest",
        "`conftest.py`",
        "most of its lines differ",
        "restores this project's; the copy is kept as `conftest_upstream.py`, which pytest does not load: "
        "bring what you need from it into this project's by hand",
    ),
    Covered(
        "package",
        "`__init__.py`",
        "most of its lines differ (any content, where this project's is empty)",
        "restores this project's; the copy is not kept (pytest reads no `pytest_plugins` from an `__init__.py`)",
        keeps_copy=False,
    ),
    Covered(
        "asset script",
        "`[tool.testharness] assets_script`",
        "most of its lines differ",
        "restores this project's; the copy is kept as `<name>_upstream.py`, which nothing runs",
    ),
    Covered(
        "helper",
        "any other file of this project under a test root",
        "most of its lines differ",
        "restores this project's; the copy is kept as `<name>_upstream<suffix>`, which nothing imports",
    ),
)
REFERENCES = (
    "a file the copy brought (not `.py`) that names one of the test files `--fix` renames, from a "
    "folder of its test root's path on (`tests/unit/<path>`, `unit/<path>`: a script's `--deselect`, `--ignore`)",
    "it names one: written for upstream's file, which --fix turns into the copy",
    "points each such name at the `_upstream.py` copy",
)


def covered(role: Role) -> Covered:
    return next(c for c in COVERED if c.role == role)


def covered_table() -> list[str]:
    """COVERED (and the references) as the rows of a Markdown table: file, replaced when, --fix."""
    rows = [f"| {c.names} | {c.replaced_when} | {c.fix} |" for c in COVERED]
    return [*rows, "| " + " | ".join(REFERENCES) + " |"]


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


def replaced(old: bytes, new: bytes, role: Role = "test file") -> bool:
    """Whether `new` replaced this project's file `old` rather than edited it (COVERED): for a
    test file, more than half of old's tests are gone and fewer than half of the lines are
    common; for any other file, fewer than half of the lines are common."""
    if role != "test file":
        return old != new and similarity(old, new) < 0.5
    before = defined_tests(old)
    if not before:
        return False  # no tests: nothing to judge by
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


def role_of(rel: str, assets_script: str | None = None) -> Role:
    """Which of COVERED the file at `rel` (relative to the project root) is."""
    path = Path(rel)
    if is_test_file(path):
        return "test file"
    if path.name == "conftest.py":
        return "conftest"
    if path.name == "__init__.py":
        return "package"
    return "asset script" if rel == assets_script else "helper"


@dataclass(frozen=True)
class Finding:
    kind: Kind
    path: str  # relative to the project root
    detail: str
    role: Role = "test file"


def verdict(
    rel: str,
    upstream: bytes,
    here: bytes | None,
    at_ref: bytes | None,
    ref: str,
    test_file: bool,
    assets_script: str | None = None,
) -> Finding:
    """What copying `upstream` to `rel` does, given the file there now (`here`) and at REF."""
    role: Role = "test file" if test_file else role_of(rel, assets_script)
    if here is None and at_ref is None:
        return Finding("new", rel, "no file of this project there: copy it", role)
    if here == upstream and (at_ref is None or at_ref == upstream):
        return Finding("identical", rel, "already here, the same content", role)
    if here == upstream:
        assert at_ref is not None
        return Finding("replaced", rel, _replaced_detail(rel, at_ref, ref, role), role)
    ours = here if here is not None else at_ref
    assert ours is not None
    tests = defined_tests(ours) if test_file else []
    what = f"this project's test file ({_count(tests)})" if tests else "this project's file"
    missing = " (deleted here, still in git)" if here is None else ""
    if test_file:
        advice = f"copy the upstream file as {side_name(Path(rel)).as_posix()}"
    else:
        advice = "keep this project's and bring what you need into it by hand"
    return Finding("collides", rel, f"is {what}{missing}: copying would replace it; {advice}", role)


def _count(tests: Sequence[str]) -> str:
    return f"{len(tests)} test" + ("" if len(tests) == 1 else "s")


WHAT = {
    "test file": "file",
    "conftest": "conftest.py (its fixtures and hooks)",
    "package": "__init__.py",
    "asset script": "asset script",
    "helper": "file",
}


def _replaced_detail(rel: str, ours: bytes, ref: str, role: Role = "test file") -> str:
    tests = defined_tests(ours) if role == "test file" else []
    shown = ", ".join(tests[:4]) + (", ..." if len(tests) > 4 else "")
    had = f" and its {_count(tests)} ({shown})" if tests else ""
    if covered(role).keeps_copy:
        action = f"keeps the copy as {side_name(Path(rel)).as_posix()} and restores this project's file from {ref}"
    else:
        action = f"restores this project's file from {ref} (the copy is not kept)"
    return (
        f"holds a copy that replaced this project's {WHAT[role]}{had} as of {ref}: "
        f"testharness port-check --fix {rel} {action}"
    )


# ---------------------------------------------------------------- references to renamed files


def reference_pattern(rel: str, test_roots: Sequence[str]) -> re.Pattern[str] | None:
    """How a script of another checkout names the test file `rel` (relative to the project
    root, as the `test_roots` are): from any folder of its test root's path on
    (`tests/unit/x/test_a.py`, `unit/x/test_a.py`, a leading `./` too), as a whole path (not the
    tail of a longer one); None when `rel` is under no test root."""
    for root in test_roots:
        if not rel.startswith(f"{root}/"):
            continue
        *above, last = root.split("/")
        optional = "".join(f"(?:{re.escape(part)}/)?" for part in above)  # (?:tests/)?unit/...
        folder, _, name = rel[len(root) + 1 :].rpartition("/")
        head = rf"(?:\./)?{optional}{re.escape(last)}/" + (f"{re.escape(folder)}/" if folder else "")
        return re.compile(rf"(?<![\w/.-])({head}){re.escape(name)}(?![\w.-])")  # group 1: up to the name
    return None


def rewrite_references(text: str, renamed: dict[str, str], test_roots: Sequence[str]) -> tuple[str, dict[str, int]]:
    """`text` with every name of a renamed test file (`renamed`: path -> the copy's path) pointed
    at its copy (only the file name changes), and how many names of each it changed."""
    counts: dict[str, int] = {}
    for rel, side in sorted(renamed.items()):
        pattern = reference_pattern(rel, test_roots)
        if pattern is None:
            continue
        text, n = pattern.subn(r"\g<1>" + Path(side).name.replace("\\", r"\\"), text)
        if n:
            counts[rel] = n
    return text, counts


def _refers_detail(counts: dict[str, int]) -> str:
    total, more = sum(counts.values()), len(counts) - 1
    files = min(counts) + (f" and {more} other test file{'s' * (more != 1)}" if more else "")
    return (
        f"names {files} of this project {total} time{'s' * (total != 1)}, meaning upstream's: "
        f"testharness port-check --fix points {'these names' if total != 1 else 'it'} at the {SUFFIX}.py copies"
    )


def is_test_file(path: Path) -> bool:
    return path.suffix == ".py" and (path.name.startswith("test_") or path.stem.endswith("_test"))


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
            findings.append(Finding("replaced", rel, _replaced_detail(rel, ours, ref, role), role))
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
                findings.append(Finding("refers", rel, _refers_detail(counts), "helper"))
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
