"""Pure rules of `testharness port-check` (testharness.port_check: git, files, the command):
which kind of file a path is (COVERED), when a copy replaced one of this project's rather than
edited it, where a file of another checkout goes, what each finding says, and how a script
names a test file that --fix renames. No pytest, no git, no file access.
"""

from __future__ import annotations

import ast
import difflib
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

Kind = Literal["new", "identical", "collides", "replaced", "refers"]
PROBLEMS: frozenset[Kind] = frozenset({"collides", "replaced", "refers"})
SUFFIX = "_upstream"  # the name a ported file takes beside this project's file of the same name
Role = Literal["test file", "conftest", "package", "asset script", "helper"]


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
        return Finding("replaced", rel, replaced_detail(rel, at_ref, ref, role), role)
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


def replaced_detail(rel: str, ours: bytes, ref: str, role: Role = "test file") -> str:
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


def refers_detail(counts: dict[str, int]) -> str:
    total, more = sum(counts.values()), len(counts) - 1
    files = min(counts) + (f" and {more} other test file{'s' * (more != 1)}" if more else "")
    return (
        f"names {files} of this project {total} time{'s' * (total != 1)}, meaning upstream's: "
        f"testharness port-check --fix points {'these names' if total != 1 else 'it'} at the {SUFFIX}.py copies"
    )


def is_test_file(path: Path) -> bool:
    return path.suffix == ".py" and (path.name.startswith("test_") or path.stem.endswith("_test"))
