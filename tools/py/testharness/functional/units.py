"""The pieces of a Python file an edit is judged by (pure: `ast` and the remote selector's parser).

A file splits into its *skeleton* (everything outside function bodies: imports, class
bodies, decorators, default values; it runs when the module is imported) and its
functions' bodies, each named by its qualname (`Class.method`; a nested function is part
of the function around it). The digests are remote_select's (parsing.parse_file), so both
selectors call the same edit a change. A run reached a function when coverage saw one line
of its body execute.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable
from typing import NamedTuple

from testharness.remote_select.parsing import parse_file

SKELETON = "<import-time code>"  # the name of the skeleton where a change is reported


class FileUnits(NamedTuple):
    skeleton: str  # digest
    units: dict[str, str]  # qualname -> body digest


def file_units(source: bytes) -> FileUnits:
    facts = parse_file(source).facts
    units: dict[str, str] = {}
    for fn in facts.funcs:  # a name defined twice (if/else): both bodies count
        units[fn.qualname] = units.get(fn.qualname, "") + fn.body_digest
    return FileUnits(facts.skel, units)


def _body_spans(source: bytes) -> list[tuple[str, int, int]]:
    """(qualname, first body line, last line) of every function, walked as parse_file names them."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return []
    spans: list[tuple[str, int, int]] = []
    todo: list[tuple[ast.AST, str]] = [(tree, "")]
    while todo:
        node, prefix = todo.pop()
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                end = child.end_lineno or child.body[-1].lineno
                spans.append((prefix + child.name, child.body[0].lineno, end))
            elif isinstance(child, ast.ClassDef):
                todo.append((child, f"{prefix}{child.name}."))
            elif not isinstance(child, ast.expr):
                todo.append((child, prefix))
    return spans


def reached_units(source: bytes, lines: Iterable[int]) -> set[str]:
    """Qualnames of the functions of `source` with an executed line in their body."""
    executed = set(lines)
    return {name for name, first, last in _body_spans(source) if any(n in executed for n in range(first, last + 1))}


def changed_units(old: FileUnits, new: FileUnits, reached: Iterable[str]) -> list[str]:
    """What changed of what a run reached in one file: SKELETON first when import-time code
    changed, then every reached function whose body changed or is gone."""
    out = [SKELETON] if old.skeleton != new.skeleton else []
    out += sorted(q for q in reached if old.units.get(q) is None or old.units.get(q) != new.units.get(q))
    return out
