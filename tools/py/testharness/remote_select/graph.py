"""Static import graph of a project (pure: no pytest, no Ray, no imports of the project).

The files come from scan.py, their references from parsing.py; this module resolves the
references to files and computes every file's transitive closure.

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

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from .config import SelectConfig
from .records import DottedString, FromImportRef, ImportRef, Ref
from .scan import ancestor_dirs, is_test_file


def _dirname(rel: str) -> str:
    return rel.rpartition("/")[0]


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
                for anc in ancestor_dirs(here):
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


def graph_from_deps(digests: dict[str, str], deps: dict[str, list[str]]) -> Graph:
    """The graph a map stored (its files' direct dependencies), without parsing anything."""
    files = sorted(digests)
    index = {p: i for i, p in enumerate(files)}
    nodes = list(files)
    edges: list[list[int]] = []
    for rel in files:
        row = []
        for d in deps.get(rel, []):
            i = index.get(d)
            if i is None:
                i = index[d] = len(nodes)
                nodes.append(d)
            row.append(i)
        edges.append(row)
    edges += [[] for _ in range(len(nodes) - len(files))]
    return Graph(nodes=nodes, n_files=len(files), deps=edges, index=index)


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
