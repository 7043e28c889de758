"""Remote-aware selection engine (pure: no pytest, no Ray).

A test must run when it has no passing record, or when, since it last passed,

  * a file of its static closure (its test file, the project modules it reaches through
    imports and dotted strings, its conftest chain) changed code that runs at import time
    (its import digest, import_time.py): testmon cannot see that code; or
  * a file changed at all inside the import closure of what it sent to Ray workers in that
    run (its recorded reach, reach.py; its static closure when the reach is unknown, e.g.
    for a test that starts processes itself): testmon cannot see code run there; or
  * for actors and tasks (remote functions) that reported what they ran (worker_trace.py),
    more precisely: a function that ran there changed its body, or a file with such a
    function, or one in the import closure of the actor's or task's module (and of the
    modules of what was sent to it), changed its import-time code.

Files are read once per content (parsing.py: lexical.py, `ast` where it cannot), cached by
digest in the parse cache file, in processes of their own for a large cold build.

Everything else is left to pytest-testmon. The pytest adapter only *adds* tests to
testmon's selection; this module never decides to skip anything.

It fails closed: when the map or the state file cannot be used (damaged: moved aside; or of
another format version), the plan is a first run's, every test selected, and the files are
rebuilt when the session ends. A damaged parse cache costs no test: the files it would have
answered for are read again.
"""

from __future__ import annotations

import os
from pathlib import Path

from testharness.state_files import move_aside, timestamp

from . import store
from .config import SelectConfig
from .graph import Graph, build_graph, graph_from_deps
from .parsing import parse_all
from .plan import Plan, test_file_of
from .recording import NOT_A_FUNCTION, record_session
from .records import (
    ActorModule,
    RanFunction,
    ReachEntry,
    SentModule,
)
from .scan import hash_files, is_test_file, scan_files


class RemoteSelector:
    """Build a Plan at configure time; record results at session end."""

    def __init__(self, root: Path, cfg: SelectConfig, files: store.StateFiles):
        self.root = root
        self.cfg = cfg
        self.files = files

    # -- graph -----------------------------------------------------------------------
    def _graph(
        self,
        digests: dict[str, str],
        files: dict[str, str],
        old: store.MapData | None,
        contents: dict[str, bytes] | None = None,
    ) -> tuple[Graph, store.MapData, bool]:
        """Graph for the current tree, reusing the old map's parse cache and deps (and the
        bytes of the files hash_files just read: `contents`)."""
        fp = self.cfg.fingerprint()
        if old is not None and old.config == fp and old.files == digests and set(old.deps) == set(digests):
            return graph_from_deps(digests, old.deps), old, False
        # No usable map: the parse cache file may still be there (kept by CI, say).
        cache = old.parsed if old is not None else store.ParseCache(store.parse_cache_file(self.files.map_file))
        parsed = parse_all(digests, files, cache, contents)
        graph = build_graph(self.cfg, digests, {d: p.refs for d, p in parsed.items()})
        deps = {graph.nodes[i]: [graph.nodes[j] for j in graph.deps[i]] for i in range(graph.n_files)}
        tests = dict(old.tests) if old is not None else {}
        new = store.MapData(config=fp, files=dict(digests), parsed=cache, deps=deps, tests=tests)
        return graph, new, True

    # -- plan ------------------------------------------------------------------------
    def plan(self) -> Plan:
        """What this session must add to testmon's selection (see the module's docstring)."""
        old_map, state, messages = self._load()
        if messages:  # a file it cannot use: it cannot be sure of anything, select as on a first run
            old_map, state = None, store.State()
        files = scan_files(str(self.root), self.cfg)
        stats: dict[str, str] = {}
        contents: dict[str, bytes] = {}  # files read now (changed or new): parsed from these bytes
        digests = hash_files(files, _known_stats(old_map), stats, contents=contents)
        # Files whose content differs from each generation still referenced by a record.
        changed_by_gen = {gid: _diff(state.generations[gid], digests) for gid in set(state.tests.values())}
        any_change = any(changed_by_gen.values())
        graph, map_data, map_dirty = self._current_map(old_map, digests, files, stats, contents, any_change)
        plan = Plan(
            digests=digests,
            files=files,
            test_files={rel for rel in digests if is_test_file(rel, self.cfg)},
            affected_files=set(),
            affected_tests=set(),
            records=state.tests,
            generations=state.generations,
            reaches=state.reaches,
            map_data=map_data,
            map_dirty=map_dirty,
            graph=graph,
            messages=messages,
            imports_loaded=state.imports,
            map_tests_loaded=dict(old_map.tests) if old_map is not None else {},
        )
        if any_change:
            self._add_affected_tests(plan, changed_by_gen)
        plan.affected_files = _files_to_collect(plan)
        cache_warning = map_data.parsed.take_warning()
        if cache_warning:
            messages.append(cache_warning)
        return plan

    def set_aside(self) -> list[str]:
        """Move the map, its parse cache and the state aside (planning failed on them): the
        names they were moved to."""
        stamp = timestamp()
        moved: list[str] = []
        with store.locked(self.files):
            for path in (self.files.map_file, store.parse_cache_file(self.files.map_file), self.files.state_file):
                if os.path.lexists(path):
                    moved.append(move_aside(path, stamp).name)
        return moved

    def _load(self) -> tuple[store.MapData | None, store.State, list[str]]:
        """The map and the state as saved, and the warnings about either (shown once)."""
        messages: list[str] = []
        old_map, warn = store.load_map(self.files.map_file)
        if warn:
            messages.append(warn)
        state, warn = store.load_state(self.files.state_file)
        if warn:
            messages.append(warn)
        return old_map, state, messages

    def _current_map(
        self,
        old_map: store.MapData | None,
        digests: dict[str, str],
        files: dict[str, str],
        stats: dict[str, str],
        contents: dict[str, bytes],
        any_change: bool,
    ) -> tuple[Graph | None, store.MapData, bool]:
        """The graph (None: nothing changed, none needed), the map for the current tree, and
        whether that map must be saved."""
        graph: Graph | None = None
        map_data = old_map or store.MapData()
        map_dirty = old_map is None
        if any_change or old_map is None or old_map.files != digests or old_map.config != self.cfg.fingerprint():
            graph, map_data, rebuilt = self._graph(digests, files, old_map, contents)
            map_dirty = map_dirty or rebuilt
        if map_data.stats != stats:
            map_data.stats = stats
            map_dirty = True
        return graph, map_data, map_dirty

    def _add_affected_tests(self, plan: Plan, changed_by_gen: dict[str, set[str]]) -> None:
        """Add to the plan the recorded tests a change since their generation reaches, and
        the changed files that reached them."""
        graph = plan.graph
        assert graph is not None
        content_bits, import_bits = self._changed_bits(plan, graph, changed_by_gen)
        memo: dict[tuple[str, tuple[ReachEntry, ...] | None, str], int] = {}
        changed_hits: set[str] = set()
        for nodeid, gid in plan.records.items():
            tfile = test_file_of(nodeid)
            if tfile not in plan.test_files:
                continue  # outside the test roots: not tracked (left to testmon)
            reach = plan.reaches.get(nodeid)
            key = (tfile, reach, gid)
            if key not in memo:
                memo[key] = self._hit(plan, graph, tfile, reach, content_bits[gid], import_bits[gid])
            hit = memo[key]
            if hit:
                plan.affected_tests.add(nodeid)
                changed_hits.update(graph.bits_to_paths(hit))
        plan.changed = sorted(changed_hits)

    def _changed_bits(
        self, plan: Plan, graph: Graph, changed_by_gen: dict[str, set[str]]
    ) -> tuple[dict[str, int], dict[str, int]]:
        """Per generation, the bits of the files changed since, and of those whose code that
        runs at import time changed (testmon cannot see those edits: see import_time.py); a
        generation saved without import digests counts every change as one."""
        imports = plan.import_digests()
        content_bits = {gid: graph.bits_of(paths) for gid, paths in changed_by_gen.items()}
        loaded = plan.imports_loaded
        import_bits = {
            gid: graph.bits_of(_diff(loaded[gid], imports)) if gid in loaded else content_bits[gid]
            for gid in changed_by_gen
        }
        return content_bits, import_bits

    def _hit(
        self, plan: Plan, graph: Graph, tfile: str, reach: tuple[ReachEntry, ...] | None, content: int, imports: int
    ) -> int:
        """Bits of the changed files (`content`; `imports`: import-time code changed) that a
        test of `tfile`, with this recorded reach (None: unknown), depends on."""
        static = graph.closure_bits(tfile)
        if reach is None:
            return static & (imports | content)
        whole, traced_mods, units = split_reach(reach)
        remote = _reach_closure(graph, whole, self.root, static)
        traced = _reach_closure(graph, traced_mods, self.root, static)
        hit = ((static | traced) & imports) | (remote & content)
        return hit | self._changed_units(plan, graph, units, content, imports, tfile)

    def _changed_units(
        self, plan: Plan, graph: Graph, units: list[RanFunction], content: int, imports: int, tfile: str
    ) -> int:
        """Bits of the files where a function that ran in a traced actor changed, or where
        import-time code changed in a file such a function lives in."""
        bits = 0
        for rel, qualname, digest in ((u.path, u.qualname, u.digest) for u in units):
            if rel not in plan.digests:
                bits |= graph.bits_of({tfile})  # its file is gone: the test must show what that does
                continue
            fbits = graph.bits_of({rel})
            if fbits & content and (fbits & imports or plan.unit_digests(rel).get(qualname, NOT_A_FUNCTION) != digest):
                bits |= fbits
        return bits

    # -- finish ----------------------------------------------------------------------
    def finish(
        self,
        plan: Plan,
        outcomes: dict[str, str],
        collected: dict[str, list[str]],
        reaches: dict[str, list[str] | None] | None = None,
    ) -> list[str]:
        """Record the session (recording.record_session): tests that ran and passed (or were
        skipped) get today's digests and the reach this run recorded for them (`reaches`;
        None or absent: unknown). Returns the warning lines of this step (a parse cache
        found damaged only now)."""
        record_session(self.files, plan, outcomes, collected, reaches or {})
        warning = plan.map_data.parsed.take_warning()
        return [warning] if warning else []


def split_reach(reach: tuple[ReachEntry, ...]) -> tuple[tuple[str, ...], tuple[str, ...], list[RanFunction]]:
    """Stored reach -> (modules sent whole, traced actors' modules, functions that ran in
    traced actors)."""
    files = tuple(e.path for e in reach if isinstance(e, SentModule))
    imports = tuple(e.path for e in reach if isinstance(e, ActorModule))
    return files, imports, [e for e in reach if isinstance(e, RanFunction)]


def _diff(old: dict[str, str], new: dict[str, str]) -> set[str]:
    """Paths whose digest differs, including files that appeared or disappeared."""
    if old == new:
        return set()
    out = {p for p, d in new.items() if old.get(p) != d}
    out.update(p for p in old if p not in new)
    return out


def _known_stats(old_map: store.MapData | None) -> dict[str, tuple[str, str]]:
    """rel -> (stat signature, digest) as the old map saw them: hash_files reads again only
    the files whose signature changed."""
    if old_map is None:
        return {}
    return {rel: (sig, old_map.files[rel]) for rel, sig in old_map.stats.items() if rel in old_map.files}


def _files_to_collect(plan: Plan) -> set[str]:
    """Test files that must be collected: affected ones, and ones with a test that never
    passed (new file, state deleted, or a test that was deselected until now)."""
    recorded_files = {test_file_of(n) for n in plan.records}
    out = {test_file_of(n) for n in plan.affected_tests}
    out.update(t for t in plan.test_files if t not in recorded_files)
    for tfile, nodeids in plan.map_data.tests.items():
        if tfile in plan.test_files and any(n not in plan.records for n in nodeids):
            out.add(tfile)
    return out


def _reach_closure(graph: Graph, reach: tuple[str, ...], root: Path, static: int) -> int:
    """Bits of the files whose code a test sent to other processes (its run-time reach)."""
    bits = 0
    for rel in reach:
        if rel in graph.index:
            bits |= graph.closure_bits(rel)
        elif not (root / rel).is_file():
            return -1  # a file it sent code from is gone: every change counts
        else:
            return static  # outside the graph's universe (e.g. examples/): its static closure
    return bits
