"""What the selector reads from a file, once per content (pure: no pytest, no Ray).

`parse_file`: a file's import references and import-time facts, read by lexical.py where it
can and with `ast` where it cannot. `parse_all`: every file of a tree, from the parse cache
(keyed by content digest) or read now, in processes of their own for a large cold build.
"""

from __future__ import annotations

import ast
import contextlib
import os
import pickle
import re
import subprocess
import sys
from collections import deque
from collections.abc import Iterator
from pathlib import Path

from . import lexical, store
from .import_time import file_facts, unparsed_facts
from .records import DottedString, FromImportRef, ImportRef, ParsedFile, PathString, Ref
from .scan import digest_bytes

# Dotted identifiers, optionally "module:attr" (entry-point style).
_DOTTED = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+(?::[A-Za-z_]\w*)?\Z")
_PYPATH = re.compile(r"[\w.\-/]+\.py\Z")


def parse_file(source: bytes) -> ParsedFile:
    """Everything the selector needs from one file's content (cached by content digest):
    its import references (see `_refs`) and the import-time facts of import_time.py.
    Read without `ast` where lexical.py can (a superset of what `ast` finds); else parsed."""
    fast = lexical.read(source)
    if fast is not None:
        return fast
    return parse_file_ast(source)


def parse_file_ast(source: bytes) -> ParsedFile:
    """parse_file with `ast` (the reference lexical.py is checked against)."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return ParsedFile((), unparsed_facts(digest_bytes(source)))
    refs = _refs(tree)
    return ParsedFile(refs, file_facts(tree))


def parse_refs(source: bytes) -> tuple[Ref, ...]:
    """Only the import references (what building a graph needs)."""
    fast = lexical.read(source)
    if fast is not None:
        return fast.refs
    try:
        return _refs(ast.parse(source))
    except (SyntaxError, ValueError):
        return ()


def _refs(tree: ast.Module) -> tuple[Ref, ...]:
    """Import references of one file, independent of where the file lives (records.Ref):
    imports, from-imports, and string literals naming a dotted module or a .py path.
    A file that does not parse has no references (its digest still counts).
    """
    refs: dict[Ref, None] = {}
    for node in _runtime_nodes(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                refs[ImportRef(alias.name)] = None
        elif isinstance(node, ast.ImportFrom):
            refs[FromImportRef(node.level, node.module or "", tuple(alias.name for alias in node.names))] = None
        elif isinstance(node, ast.Call):
            ref = _relative_import_module(node)
            if ref is not None:
                refs[ref] = None
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            text = node.value
            if 2 < len(text) < 200:
                if _DOTTED.match(text):
                    refs[DottedString(text.replace(":", "."))] = None
                elif _PYPATH.match(text):
                    refs[PathString(text)] = None
    return tuple(refs)


def _relative_import_module(call: ast.Call) -> Ref | None:
    """`import_module(".x", package="a.b")` (literal package) or `import_module(".x",
    __package__)` (the file's own package): the module a relative name loads. A computed
    name or package stays invisible (documented)."""
    func = call.func
    callee = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None
    if callee != "import_module" or not call.args:
        return None
    name = call.args[0]
    if not isinstance(name, ast.Constant) or not isinstance(name.value, str) or not name.value.startswith("."):
        return None
    package = call.args[1] if len(call.args) > 1 else next((k.value for k in call.keywords if k.arg == "package"), None)
    rest = name.value.lstrip(".")
    level = len(name.value) - len(rest)
    if rest and not all(part.isidentifier() for part in rest.split(".")):
        return None
    if isinstance(package, ast.Name) and package.id == "__package__":
        return FromImportRef(level, rest, ())
    if isinstance(package, ast.Constant) and isinstance(package.value, str) and package.value:
        base = package.value.split(".")
        if level - 1 >= len(base):
            return None  # above the top-level package: the import fails
        return ImportRef(".".join(base[: len(base) - (level - 1)] + ([rest] if rest else [])))
    return None


def _runtime_nodes(tree: ast.AST) -> Iterator[ast.AST]:
    """`ast.walk`, minus the bodies of `if TYPE_CHECKING:` blocks: imports there never run
    (type checkers read them), so what they name is not part of the file's closure."""
    todo = deque([tree])  # breadth first, as ast.walk
    while todo:
        node = todo.popleft()
        yield node
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            todo.extend(node.orelse)
            continue
        todo.extend(ast.iter_child_nodes(node))


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def parse_all(
    digests: dict[str, str],
    files: dict[str, str],
    cache: store.ParseCache,
    contents: dict[str, bytes] | None = None,
) -> dict[str, ParsedFile]:
    """parse_file() result for every digest, from `cache` (keyed by content digest) or read
    now (from `contents` where given: path -> bytes) and added to it."""
    parsed: dict[str, ParsedFile] = {}
    misses: dict[str, str] = {}  # digest -> path
    for rel, dig in digests.items():
        if dig in parsed or dig in misses:
            continue
        hit = cache.get(dig)
        if hit is None:
            misses[dig] = files[rel]
        else:
            parsed[dig] = hit
    for dig, hit in zip(misses, _read_files(list(misses.values()), contents), strict=True):
        hit = hit if hit is not None else ParsedFile((), unparsed_facts(dig))
        cache[dig] = parsed[dig] = hit
    return parsed


# Below these, starting processes costs more than it saves (serial: about 13 MB/s of source).
PARALLEL_MIN_FILES = 400
PARALLEL_MIN_BYTES = 16 << 20
_HARNESS_PARENT = str(Path(__file__).resolve().parents[2])  # the directory holding `testharness`
_CHILD = (
    "import pickle, sys; sys.path.insert(0, sys.argv[1]); "
    "from testharness.remote_select.parsing import _read_chunk; "
    "pickle.dump(_read_chunk(pickle.load(sys.stdin.buffer)), sys.stdout.buffer)"
)


def _read_files(paths: list[str], contents: dict[str, bytes] | None = None) -> list[ParsedFile | None]:
    """parse_file() of each path (None: unreadable), from `contents` where it holds the
    path's bytes; in processes of their own when there are many (a cold build of a large
    tree), which read the files again: one per CPU this process may use, at most 8.
    Plain `python -I -c` children (not multiprocessing, whose children import the
    caller's main module again); if they fail, the files are read here."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 1
    workers = min(cpus, 8)
    if workers > 1 and len(paths) >= PARALLEL_MIN_FILES and _total_size(paths) >= PARALLEL_MIN_BYTES:
        chunks = [paths[i::workers] for i in range(workers)]
        procs: list[subprocess.Popen[bytes]] = []
        try:
            for chunk in chunks:
                proc = subprocess.Popen(
                    [sys.executable, "-I", "-c", _CHILD, _HARNESS_PARENT],
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.DEVNULL,
                )
                procs.append(proc)
                assert proc.stdin is not None
                proc.stdin.write(pickle.dumps(chunk))
                proc.stdin.close()
            results = []
            for proc in procs:
                assert proc.stdout is not None
                results.append(pickle.loads(proc.stdout.read()))
                if proc.wait() != 0:
                    raise RuntimeError("a reader process failed")
        except Exception:  # noqa: BLE001  no processes to be had: read the files here
            for proc in procs:
                with contextlib.suppress(OSError):
                    proc.kill()
                proc.wait()
        else:
            by_path = {
                p: hit for chunk, got in zip(chunks, results, strict=True) for p, hit in zip(chunk, got, strict=True)
            }
            return [by_path[p] for p in paths]
    return _read_chunk(paths, contents)


def _total_size(paths: list[str]) -> int:
    total = 0
    for path in paths:
        with contextlib.suppress(OSError):
            total += os.path.getsize(path)
    return total


def _read_chunk(paths: list[str], contents: dict[str, bytes] | None = None) -> list[ParsedFile | None]:
    out: list[ParsedFile | None] = []
    for path in paths:
        data = contents.get(path) if contents else None
        if data is None:
            try:
                with open(path, "rb") as fh:
                    data = fh.read()
            except OSError:
                out.append(None)
                continue
        out.append(parse_file(data))
    return out
