"""Which part of a file runs at import time (pure: `ast` only).

pytest-testmon fingerprints the code a test executes while it runs. Code executed when a
module is *imported* (module level, class bodies, decorators, default values, functions
called from there) or by pytest itself (hooks) runs outside any test, so testmon misses
edits to it. The selector therefore splits a file's content in two:

  * its *import digest*: the file with every function body removed, plus the bodies of
    the functions that run at import time (see `import_digests`); an edit that changes
    it re-selects every test whose static closure holds the file;
  * the remaining function bodies, which run when called: testmon covers calls in the
    pytest process, the run-time reach record (reach.py) covers calls in Ray workers.

Which functions run at import time is decided by name across the project: a call `x.f()`,
a decorator `@f` or a function passed as an argument (`map(f, xs)`) at import time marks
every function or method named `f`, a call
`C()` marks the constructors of every class `C`, and the names those bodies call are
marked in turn. Conservative, and cheap. Fixture bodies count as import-time code of their
own file (one set-up serves many tests, and testmon charges it to the first one only),
but what they call runs inside a test, where testmon sees it, so it is not marked.
"""

from __future__ import annotations

import ast
import hashlib
from collections.abc import Iterable, Mapping

# A file's facts (records.ImportFacts) are cached by content digest in the map file.
# Function kinds: CALL_TIME runs when called; ALWAYS runs whoever imports the module
# (pytest hooks, implicit dunders); OWN_BODY is a fixture: its own body counts, not its callees.
from .records import ALWAYS, CALL_TIME, OWN_BODY, FunctionFacts, ImportFacts

# Run by Python or pytest on their own, whoever imports the module.
_IMPLICIT = frozenset({"__init_subclass__", "__set_name__", "__class_getitem__", "__getattr__", "__dir__"})
_CONSTRUCTORS = ("__init__", "__new__", "__post_init__")


def _digest(text: str) -> str:
    return hashlib.blake2b(text.encode(), digest_size=12).hexdigest()


def _name(node: ast.AST) -> str | None:
    if isinstance(node, ast.Call):
        node = node.func
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def _called_names(nodes: Iterable[ast.AST]) -> set[str]:
    out: set[str] = set()
    for root in nodes:
        for node in ast.walk(root):
            if isinstance(node, ast.Call):
                # The callee, and functions passed to it (`map(f, xs)`, `key=f`): both may run.
                for target in (node, *node.args, *(k.value for k in node.keywords)):
                    name = _name(target) if target is node or isinstance(target, (ast.Name, ast.Attribute)) else None
                    if name:
                        out.add(name)
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                out.update(n for n in map(_name, node.decorator_list) if n)  # `@f` calls f
    return out


def _kind(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    if fn.name.startswith("pytest_") or fn.name in _IMPLICIT:
        return ALWAYS
    if any("fixture" in ast.unparse(d) for d in fn.decorator_list):
        return OWN_BODY
    return CALL_TIME


def file_facts(tree: ast.Module) -> ImportFacts:
    """Facts of a parsed file. Strips the bodies of `tree`'s functions in place."""
    funcs: list[FunctionFacts] = []
    todo: list[tuple[ast.AST, str]] = [(tree, "")]
    while todo:
        node, prefix = todo.pop()
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                qualname = prefix + child.name
                body = ast.Module(body=child.body, type_ignores=[])
                calls = tuple(sorted(_called_names(child.body)))
                funcs.append(FunctionFacts(qualname, _digest(ast.dump(body)), _kind(child), calls))
                child.body = [ast.Pass()]
            elif isinstance(child, ast.ClassDef):
                todo.append((child, f"{prefix}{child.name}."))
            elif not isinstance(child, ast.expr):
                todo.append((child, prefix))  # compound statements (if/try/with) nest
    funcs.sort()
    return ImportFacts(_digest(ast.dump(tree)), tuple(sorted(_called_names([tree]))), tuple(funcs))


def unparsed_facts(content_digest: str) -> ImportFacts:
    """Facts of a file that does not parse: importing it fails, so all of it counts."""
    return ImportFacts(content_digest, (), ())


def _runs_at_import(qualname: str, kind: int, names: set[str]) -> bool:
    if kind != CALL_TIME:
        return True
    parts = qualname.split(".")
    if parts[-1] in names:
        return True
    return len(parts) > 1 and parts[-1] in _CONSTRUCTORS and parts[-2] in names  # `C()`


def import_digests(facts: Mapping[str, ImportFacts]) -> dict[str, str]:
    """Import digest of every file (rel -> digest)."""
    names: set[str] = set()
    callees: dict[str, list[FunctionFacts]] = {}  # called name -> functions it may mean
    for f in facts.values():
        names.update(f.top)
        for fn in f.funcs:
            parts = fn.qualname.split(".")
            callees.setdefault(parts[-1], []).append(fn)
            if len(parts) > 1 and parts[-1] in _CONSTRUCTORS:
                callees.setdefault(parts[-2], []).append(fn)
            if fn.kind == ALWAYS:
                names.update(fn.calls)
    todo = list(names)
    while todo:  # what import-time code calls runs at import time too
        for fn in callees.get(todo.pop(), ()):
            for callee in fn.calls:
                if callee not in names:
                    names.add(callee)
                    todo.append(callee)
    out: dict[str, str] = {}
    for rel, f in facts.items():
        bodies = [fn.body_digest for fn in f.funcs if _runs_at_import(fn.qualname, fn.kind, names)]
        out[rel] = _digest(f.skel + "|" + ",".join(bodies))
    return out
