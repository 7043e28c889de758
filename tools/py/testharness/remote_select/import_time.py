"""Which part of a file runs at import time (pure: `ast` only).

pytest-testmon fingerprints the code a test executes while it runs. Code executed when a
module is *imported* (module level, class bodies, decorators, default values, functions
called from there, fixtures, pytest hooks) runs during collection or in a shared fixture,
so testmon misses edits to it. The selector therefore splits a file's content in two:

  * its *import digest*: the file with every function body removed, plus the bodies of the
    functions that run at import time (see `import_digests`); an edit that changes it
    re-selects every test whose static closure holds the file;
  * the remaining function bodies, which run when called: testmon covers calls in the
    pytest process, the run-time reach record (reach.py) covers calls in Ray workers.

Which functions run at import time is decided by name across the whole project (a call
`x.f()` at import time marks every function or method named `f`), closed transitively over
the names their bodies call: conservative, and cheap.
"""

from __future__ import annotations

import ast
import hashlib
from collections.abc import Iterable
from typing import Any

# JSON-friendly facts of one file, cached by content digest:
#   {"skel": digest of the file with function bodies removed,
#    "top": names called at import time,
#    "funcs": [[name, body digest, always (0/1), names called in the body], ...]}
Facts = dict[str, Any]


def _digest(text: str) -> str:
    return hashlib.blake2b(text.encode(), digest_size=12).hexdigest()


def _called_names(nodes: Iterable[ast.AST]) -> set[str]:
    out: set[str] = set()
    for root in nodes:
        for node in ast.walk(root):
            if isinstance(node, ast.Call):
                func = node.func
                if isinstance(func, ast.Name):
                    out.add(func.id)
                elif isinstance(func, ast.Attribute):
                    out.add(func.attr)
    return out


def _always_at_import(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """Bodies that run implicitly, outside any test's own execution."""
    name = fn.name
    if name.startswith("__") and name.endswith("__"):  # __init__, __init_subclass__, __getattr__...
        return True
    if name.startswith("pytest_"):  # pytest hooks in conftest/plugins
        return True
    return any("fixture" in ast.unparse(d) for d in fn.decorator_list)  # fixture set-ups are shared


def file_facts(tree: ast.Module) -> Facts:
    """Facts of a parsed file. Strips the bodies of `tree`'s functions in place."""
    funcs: list[list[Any]] = []
    todo: list[ast.AST] = [tree]
    while todo:
        node = todo.pop()
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                body = ast.Module(body=child.body, type_ignores=[])
                funcs.append(
                    [child.name, _digest(ast.dump(body)), int(_always_at_import(child)), sorted(_called_names(child.body))]
                )
                child.body = [ast.Pass()]
            elif isinstance(child, ast.ClassDef) or not isinstance(child, ast.expr):
                todo.append(child)  # class bodies and compound statements (if/try/with) nest
    funcs.sort()
    return {"skel": _digest(ast.dump(tree)), "top": sorted(_called_names([tree])), "funcs": funcs}


def unparsed_facts(content_digest: str) -> Facts:
    """Facts of a file that does not parse: importing it fails, so all of it counts."""
    return {"skel": content_digest, "top": [], "funcs": []}


def import_digests(facts: dict[str, Facts]) -> dict[str, str]:
    """Import digest of every file (rel -> digest)."""
    names: set[str] = set()
    by_name: dict[str, list[list[Any]]] = {}
    for f in facts.values():
        names.update(f["top"])
        for fn in f["funcs"]:
            by_name.setdefault(fn[0], []).append(fn)
            if fn[2]:
                names.update(fn[3])
    todo = list(names)
    while todo:  # functions called at import time call others: close over names
        for fn in by_name.get(todo.pop(), ()):
            for callee in fn[3]:
                if callee not in names:
                    names.add(callee)
                    todo.append(callee)
    out: dict[str, str] = {}
    for rel, f in facts.items():
        bodies = [fn[1] for fn in f["funcs"] if fn[2] or fn[0] in names]
        out[rel] = _digest(f["skel"] + "|" + ",".join(bodies))
    return out
