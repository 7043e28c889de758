"""Static import graph of a project (pure: no pytest, no Ray, no imports of the project).

Nodes are repo-relative POSIX paths. Edges come from, for every file:
  * `import a.b.c` / `from a.b import c` / relative imports: every existing module on the
    dotted path (so package `__init__.py` files are included),
  * string literals naming a project module or `module.Class` / `module:Class` (actor
    classes are often passed around as dotted strings),
  * its package's `__init__.py` (importing a module runs its parents' `__init__`),
  * for test files and conftest files, every `conftest.py` above them.

A name that *could* be a project module but has no file gets a "phantom" node (a path that
does not exist now). Phantoms make deletions and creations visible: when a module a test
depended on is deleted, or a file appears where only an attribute was before, the phantom's
content (absent vs present) differs from what was recorded, so the test is re-selected.
"""

from __future__ import annotations

import ast
import fnmatch
import hashlib
import os
import re
import time
from collections import deque
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from . import lexical
from .config import SelectConfig
from .import_time import file_facts, unparsed_facts
from .records import DottedString, FromImportRef, ImportRef, ParsedFile, PathString, Ref

# Dotted identifiers, optionally "module:attr" (entry-point style).
_DOTTED = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+(?::[A-Za-z_]\w*)?\Z")
_PYPATH = re.compile(r"[\w.\-/]+\.py\Z")
_SKIP_DIRS = {"__pycache__", "node_modules", "site-packages"}


def digest_bytes(data: bytes) -> str:
    """Content digest of a file (never an mtime: `touch` and moved checkouts change nothing)."""
    return hashlib.blake2b(data, digest_size=12).hexdigest()


def _walk_py(root: str, rel: str, out: dict[str, str]) -> None:
    """Add `rel`'s .py files (recursively) to out as rel_path -> absolute path."""
    base = os.path.join(root, rel) if rel else root
    try:
        entries = list(os.scandir(base))
    except (FileNotFoundError, NotADirectoryError, PermissionError):
        return
    for entry in entries:
        name = entry.name
        if name.startswith(".") or name in _SKIP_DIRS:
            continue
        child = f"{rel}/{name}" if rel else name
        try:
            if entry.is_dir(follow_symlinks=False):
                _walk_py(root, child, out)
            elif name.endswith(".py") and entry.is_file():
                out[child] = entry.path
        except OSError:
            continue


def scan_files(root: str, cfg: SelectConfig) -> dict[str, str]:
    """Every Python file of the graph's universe: rel POSIX path -> absolute path.

    The universe is the source packages (under each source root), the test roots, and the
    conftest.py files above the test roots (pytest loads them too).
    """
    out: dict[str, str] = {}
    for src in cfg.source_roots:
        for pkg in cfg.source_packages:
            rel = f"{src}/{pkg}" if src else pkg
            _walk_py(root, rel, out)
            single = os.path.join(root, rel + ".py")
            if os.path.isfile(single):
                out[rel + ".py"] = single
    for test_root in cfg.test_roots:
        full = os.path.join(root, test_root) if test_root else root
        if os.path.isfile(full) and full.endswith(".py"):
            out[test_root] = full
            test_root = test_root.rpartition("/")[0]
        else:
            _walk_py(root, test_root, out)
        for anc in _ancestor_dirs(test_root):
            rel = f"{anc}/conftest.py" if anc else "conftest.py"
            path = os.path.join(root, rel)
            if os.path.isfile(path):
                out[rel] = path
    return out


RACY_S = 2.0  # a file written this recently may change again within its mtime's tick


def hash_files(
    files: dict[str, str],
    known: Mapping[str, tuple[str, str]] | None = None,
    stats: dict[str, str] | None = None,
    now: float | None = None,
    contents: dict[str, bytes] | None = None,
) -> dict[str, str]:
    """Content digests of the given files (rel -> digest); unreadable files are left out.

    `known`: rel -> (stat signature, digest) from an earlier run; a file whose signature
    (size, mtime, ctime, inode: any write changes ctime, which no tool can set back) is
    unchanged is not read again, as git's index does. `stats` receives each file's
    signature, except for files written within RACY_S seconds of `now` (read again next
    time). The digest is still of the content: `touch` or a moved checkout changes nothing.
    `contents` receives the bytes of each file read (absolute path -> bytes), so a file
    that must then be parsed is not read twice, and is parsed as it was hashed.
    """
    out: dict[str, str] = {}
    known = known or {}
    racy_ns = int(((time.time() if now is None else now) - RACY_S) * 1e9)
    for rel, path in files.items():
        try:
            st = os.stat(path)
        except OSError:
            continue
        sig = f"{st.st_size}:{st.st_mtime_ns}:{st.st_ctime_ns}:{st.st_ino}"
        seen = known.get(rel)
        if seen is not None and seen[0] == sig:
            out[rel] = seen[1]
        else:
            try:
                with open(path, "rb") as fh:
                    data = fh.read()
            except OSError:
                continue
            out[rel] = digest_bytes(data)
            if contents is not None:
                contents[path] = data
        if stats is not None and max(st.st_mtime_ns, st.st_ctime_ns) < racy_ns:
            stats[rel] = sig
    return out


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


def _ancestor_dirs(rel_dir: str) -> list[str]:
    """ "a/b" -> ["", "a", "a/b"]."""
    out = [""]
    if rel_dir:
        parts = rel_dir.split("/")
        out += ["/".join(parts[: i + 1]) for i in range(len(parts))]
    return out


def _dirname(rel: str) -> str:
    return rel.rpartition("/")[0]


def is_test_file(rel: str, cfg: SelectConfig) -> bool:
    """A test module pytest would collect: under a test root and matching `python_files`."""
    name = rel.rpartition("/")[2]
    if not any(fnmatch.fnmatch(name, pat) for pat in cfg.test_patterns):
        return False
    return any(not r or rel == r or rel.startswith(r + "/") for r in cfg.test_roots)


@dataclass
class Graph:
    """Nodes (existing files first, then phantoms) and their direct dependencies."""

    nodes: list[str]
    n_files: int  # nodes[:n_files] exist, the rest are phantoms
    deps: list[list[int]]
    index: dict[str, int] = field(default_factory=dict)
    _closures: list[int] | None = None

    def __post_init__(self) -> None:
        if not self.index:
            self.index = {p: i for i, p in enumerate(self.nodes)}

    def closures(self) -> list[int]:
        """Transitive closure of every node as a bitset (bit i = nodes[i]), cycles included."""
        if self._closures is None:
            self._closures = _closure_bitsets(self.deps)
        return self._closures

    def closure_bits(self, rel: str) -> int:
        return self.closures()[self.index[rel]]

    def bits_to_paths(self, bits: int) -> list[str]:
        out = []
        nodes = self.nodes
        i = 0
        while bits:
            low = bits & -bits
            i = low.bit_length() - 1
            out.append(nodes[i])
            bits ^= low
        return out

    def bits_of(self, paths: Iterable[str]) -> int:
        bits = 0
        index = self.index
        for p in paths:
            i = index.get(p)
            if i is not None:
                bits |= 1 << i
        return bits


class _Resolver:
    """Turns raw references into repo-relative paths (existing files and phantoms)."""

    def __init__(self, files: set[str] | dict[str, str], cfg: SelectConfig):
        self.files = files
        self.cfg = cfg
        self.pkgs = set(cfg.source_packages)
        self.src_prefixes = [f"{r}/" if r else "" for r in cfg.source_roots]
        self.test_prefixes = [f"{r}/" if r else "" for r in cfg.test_roots]
        self._memo: dict[tuple[str, tuple[str, ...]], tuple[list[str], list[str]]] = {}

    def _in_prefixes(
        self, parts: list[str], prefixes: tuple[str, ...], phantom: bool, pkg_init: bool = False
    ) -> tuple[list[str], list[str]]:
        """Existing modules on the dotted path under each prefix, plus phantoms past the end.

        `pkg_init` adds the `__init__.py` of the prefix itself (`from . import x`).
        """
        key = (".".join(parts) + ("/" if pkg_init else ""), prefixes)
        hit = self._memo.get(key)
        if hit is not None:
            return hit
        found: list[str] = []
        phantoms: list[str] = []
        files = self.files
        best_prefix, best_k = (prefixes[0] if prefixes else ""), 0
        for prefix in prefixes:
            if pkg_init and f"{prefix}__init__.py" in files:
                found.append(f"{prefix}__init__.py")
            longest = 0
            for k in range(1, len(parts) + 1):
                # Namespace packages have no __init__: keep walking past a missing level.
                stem = prefix + "/".join(parts[:k])
                if stem + ".py" in files:
                    found.append(stem + ".py")
                    longest = k
                if stem + "/__init__.py" in files:
                    found.append(stem + "/__init__.py")
                    longest = k
            if longest > best_k:
                best_prefix, best_k = prefix, longest
        if phantom:
            for k in range(best_k + 1, len(parts) + 1):
                stem = best_prefix + "/".join(parts[:k])
                phantoms.append(stem + ".py")
                phantoms.append(stem + "/__init__.py")
        result = (found, phantoms)
        self._memo[key] = result
        return result

    def _absolute(self, dotted: str, rel: str) -> tuple[list[str], list[str]]:
        parts = dotted.split(".")
        if parts[0] in self.pkgs:
            return self._in_prefixes(parts, tuple(self.src_prefixes), True)
        # Not a project package: only files of the universe can match (test helpers,
        # rootdir-inserted sibling modules); never phantoms (`import torch` is not ours).
        here = _dirname(rel)
        prefixes = [""] + ([here + "/"] if here else []) + self.test_prefixes
        return self._in_prefixes(parts, tuple(dict.fromkeys(prefixes)), False)

    def resolve(self, rel: str, refs: Iterable[Ref]) -> tuple[list[str], list[str]]:
        found: list[str] = []
        phantoms: list[str] = []
        for ref in refs:
            if isinstance(ref, ImportRef):
                f, p = self._absolute(ref.module, rel)
            elif isinstance(ref, FromImportRef):
                f, p = self._from_import(ref, rel)
            elif isinstance(ref, DottedString):
                if ref.dotted.split(".", 1)[0] not in self.pkgs:
                    continue
                f, p = self._absolute(ref.dotted, rel)
            else:
                here = _dirname(rel)
                f = [c for c in (ref.path, f"{here}/{ref.path}" if here else ref.path) if c in self.files]
                p = []
            found += f
            phantoms += p
        return found, phantoms

    def _from_import(self, ref: FromImportRef, rel: str) -> tuple[list[str], list[str]]:
        names = [n for n in ref.names if n != "*"]
        f: list[str] = []
        p: list[str] = []
        if ref.level == 0:
            for dotted in [ref.module] + [f"{ref.module}.{n}" for n in names]:
                ff, pp = self._absolute(dotted, rel)
                f += ff
                p += pp
            return f, p
        base = _dirname(rel)
        for _ in range(ref.level - 1):
            base = _dirname(base)
        prefix = f"{base}/" if base else ""
        mod_parts = ref.module.split(".") if ref.module else []
        ff, pp = self._in_prefixes(mod_parts, (prefix,), True, pkg_init=True)
        f, p = list(ff), list(pp)
        for n in names:
            ff, pp = self._in_prefixes(mod_parts + [n], (prefix,), True)
            f += ff
            p += pp
        return f, p


def build_graph(
    cfg: SelectConfig,
    digests: dict[str, str],
    refs_by_digest: Mapping[str, Sequence[Ref]],
) -> Graph:
    """Graph over `digests`' files; `refs_by_digest` must hold the refs of every digest."""
    files = sorted(digests)
    resolver = _Resolver(set(files), cfg)
    index: dict[str, int] = {p: i for i, p in enumerate(files)}
    nodes = list(files)
    deps: list[list[int]] = []
    conftest_memo: dict[str, tuple[list[str], list[str]]] = {}

    def node(path: str) -> int:
        i = index.get(path)
        if i is None:
            i = index[path] = len(nodes)
            nodes.append(path)
        return i

    raw: list[tuple[list[str], list[str]]] = []
    for rel in files:
        found, phantoms = resolver.resolve(rel, refs_by_digest.get(digests[rel], ()))
        here = _dirname(rel)
        name = rel.rpartition("/")[2]
        # The package's __init__ runs before any of its modules.
        parent_dir = _dirname(here) if name == "__init__.py" else here
        if name == "__init__.py":
            init = f"{parent_dir}/__init__.py" if parent_dir else "__init__.py"
            if here and init in index:
                found.append(init)
        else:
            init = f"{here}/__init__.py" if here else "__init__.py"
            if init in index:
                found.append(init)
        if name == "conftest.py" or is_test_file(rel, cfg):
            chain = conftest_memo.get(here)
            if chain is None:
                have: list[str] = []
                missing: list[str] = []
                for anc in _ancestor_dirs(here):
                    c = f"{anc}/conftest.py" if anc else "conftest.py"
                    (have if c in index else missing).append(c)
                chain = conftest_memo[here] = (have, missing)
            found += [c for c in chain[0] if c != rel]
            phantoms += chain[1]
        raw.append((found, phantoms))
    for rel, (found, phantoms) in zip(files, raw, strict=True):
        own = index[rel]
        d = {index[f] for f in found}
        d.update(node(p) for p in phantoms)
        d.discard(own)
        deps.append(sorted(d))
    deps += [[] for _ in range(len(nodes) - len(files))]
    return Graph(nodes=nodes, n_files=len(files), deps=deps, index=index)


def _closure_bitsets(deps: list[list[int]]) -> list[int]:
    """Reachability bitsets via Tarjan's SCC (iterative), then OR in reverse topological order."""
    n = len(deps)
    index_of = [-1] * n
    low = [0] * n
    on_stack = [False] * n
    stack: list[int] = []
    comp_of = [-1] * n
    comp_bits: list[int] = []
    counter = 0
    for start in range(n):
        if index_of[start] != -1:
            continue
        work: list[tuple[int, int]] = [(start, 0)]
        while work:
            v, i = work.pop()
            if i == 0:
                index_of[v] = low[v] = counter
                counter += 1
                stack.append(v)
                on_stack[v] = True
            succ = deps[v]
            recursed = False
            while i < len(succ):
                w = succ[i]
                i += 1
                if index_of[w] == -1:
                    work.append((v, i))
                    work.append((w, 0))
                    recursed = True
                    break
                if on_stack[w]:
                    low[v] = min(low[v], index_of[w])
            if recursed:
                continue
            if low[v] == index_of[v]:
                # Tarjan emits a component after all components it reaches: OR them in.
                c = len(comp_bits)
                members = []
                while True:
                    w = stack.pop()
                    on_stack[w] = False
                    comp_of[w] = c
                    members.append(w)
                    if w == v:
                        break
                bits = 0
                for w in members:
                    bits |= 1 << w
                for w in members:
                    for x in deps[w]:
                        cx = comp_of[x]
                        if cx != c:
                            bits |= comp_bits[cx]
                comp_bits.append(bits)
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[v])
    return [comp_bits[comp_of[v]] for v in range(n)]
