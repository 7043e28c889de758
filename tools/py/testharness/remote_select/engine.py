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

Files are read once per content (lexical.py, `ast` where it cannot), cached by digest in
the parse cache file, in processes of their own for a large cold build (`_read_files`).

Everything else is left to pytest-testmon. The pytest adapter only *adds* tests to
testmon's selection; this module never decides to skip anything.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import pickle
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from . import store
from .config import SelectConfig
from .graph import Graph, build_graph, hash_files, is_test_file, parse_file, scan_files
from .import_time import import_digests, unparsed_facts
from .records import (
    ActorModule,
    ParsedFile,
    RanFunction,
    ReachEntry,
    RecordError,
    SentModule,
    parse_reach_entry,
    sorted_reach,
)

OK_OUTCOMES = frozenset({"passed", "skipped"})  # a skip is not a failure to re-run


def test_file_of(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def generation_id(digests: dict[str, str]) -> str:
    blob = json.dumps(sorted(digests.items()), separators=(",", ":")).encode()
    return hashlib.blake2b(blob, digest_size=8).hexdigest()


@dataclass
class Plan:
    """What this session must add to testmon's selection, and what to record at the end."""

    digests: dict[str, str]
    files: dict[str, str]  # rel -> absolute path
    test_files: set[str]  # test files present now (under the test roots)
    affected_files: set[str]  # must be collected (some test may need to run)
    affected_tests: set[str]  # recorded tests whose closure changed
    records: dict[str, str]  # nodeid -> generation id (as loaded)
    generations: dict[str, dict[str, str]]
    reaches: dict[str, tuple[ReachEntry, ...]]  # nodeid -> recorded remote reach (as loaded)
    map_data: store.MapData
    map_dirty: bool
    graph: Graph | None
    messages: list[str] = field(default_factory=list)
    changed: list[str] = field(default_factory=list)  # changed files that affect a test
    imports_loaded: dict[str, dict[str, str]] = field(default_factory=dict)  # gid -> import digests
    imports: dict[str, str] | None = None  # current import digests, once computed
    units: dict[str, dict[str, str]] = field(default_factory=dict)  # rel -> function body digests, as needed
    map_tests_loaded: dict[str, tuple[str, ...]] = field(default_factory=dict)  # the map's node ids, as loaded

    def must_run(self, nodeid: str) -> bool:
        """True when this test has to run whatever testmon says."""
        if test_file_of(nodeid) not in self.test_files:
            return False  # outside the test roots: not tracked, testmon decides
        return nodeid not in self.records or nodeid in self.affected_tests


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
            return _graph_from_deps(digests, old.deps), old, False
        # No usable map: the parse cache file may still be there (kept by CI, say).
        cache = old.parsed if old is not None else store.ParseCache(store.parse_cache_file(self.files.map_file))
        parsed = _parse_all(digests, files, cache, contents)
        graph = build_graph(self.cfg, digests, {d: p.refs for d, p in parsed.items()})
        deps = {graph.nodes[i]: [graph.nodes[j] for j in graph.deps[i]] for i in range(graph.n_files)}
        tests = dict(old.tests) if old is not None else {}
        new = store.MapData(config=fp, files=dict(digests), parsed=cache, deps=deps, tests=tests)
        return graph, new, True

    def import_digests(self, plan: Plan) -> dict[str, str]:
        """Import digests of the current tree (import_time.py), computed once per plan."""
        if plan.imports is None:
            parsed = _parse_all(plan.digests, plan.files, plan.map_data.parsed)
            plan.imports = import_digests({rel: parsed[d].facts for rel, d in plan.digests.items()})
        return plan.imports

    # -- plan ------------------------------------------------------------------------
    def plan(self) -> Plan:
        messages: list[str] = []
        old_map, warn = store.load_map(self.files.map_file)
        if warn:
            messages.append(warn)
        state, warn = store.load_state(self.files.state_file)
        if warn:
            messages.append(warn)
        generations, records, reaches = state.generations, state.tests, state.reaches

        files = scan_files(str(self.root), self.cfg)
        known = {}
        if old_map is not None:
            known = {rel: (sig, old_map.files[rel]) for rel, sig in old_map.stats.items() if rel in old_map.files}
        stats: dict[str, str] = {}
        contents: dict[str, bytes] = {}  # files read now (changed or new): parsed from these bytes
        digests = hash_files(files, known, stats, contents=contents)
        test_files = {rel for rel in digests if is_test_file(rel, self.cfg)}

        # Files whose content differs from each generation still referenced by a record.
        changed_by_gen = {gid: _diff(generations[gid], digests) for gid in set(records.values())}
        any_change = any(changed_by_gen.values())

        graph: Graph | None = None
        map_data = old_map or store.MapData()
        map_dirty = old_map is None
        if any_change or old_map is None or old_map.files != digests or old_map.config != self.cfg.fingerprint():
            graph, map_data, rebuilt = self._graph(digests, files, old_map, contents)
            map_dirty = map_dirty or rebuilt
        if map_data.stats != stats:
            map_data.stats = stats
            map_dirty = True

        plan = Plan(
            digests=digests,
            files=files,
            test_files=test_files,
            affected_files=set(),
            affected_tests=set(),
            records=records,
            generations=generations,
            reaches=reaches,
            map_data=map_data,
            map_dirty=map_dirty,
            graph=graph,
            messages=messages,
            imports_loaded=state.imports,
            map_tests_loaded=dict(old_map.tests) if old_map is not None else {},
        )
        affected_tests = plan.affected_tests
        changed_hits: set[str] = set()
        if any_change:
            assert graph is not None
            imports = self.import_digests(plan)
            content_bits = {gid: graph.bits_of(paths) for gid, paths in changed_by_gen.items()}
            # Edits to code that runs at import time: testmon cannot see them (see import_time.py).
            import_bits = {
                gid: graph.bits_of(_diff(state.imports[gid], imports)) if gid in state.imports else content_bits[gid]
                for gid in changed_by_gen
            }
            memo: dict[tuple[str, tuple[ReachEntry, ...] | None, str], int] = {}
            for nodeid, gid in records.items():
                tfile = test_file_of(nodeid)
                if tfile not in test_files:
                    continue  # outside the test roots: not tracked (left to testmon)
                reach = reaches.get(nodeid)
                key = (tfile, reach, gid)
                hit = memo.get(key)
                if hit is None:
                    static = graph.closure_bits(tfile)
                    if reach is None:
                        hit = static & (import_bits[gid] | content_bits[gid])
                    else:
                        whole, traced_mods, units = split_reach(reach)
                        remote = _reach_closure(graph, whole, self.root, static)
                        traced = _reach_closure(graph, traced_mods, self.root, static)
                        hit = ((static | traced) & import_bits[gid]) | (remote & content_bits[gid])
                        hit |= self._changed_units(plan, graph, units, content_bits[gid], import_bits[gid], tfile)
                    memo[key] = hit
                if hit:
                    affected_tests.add(nodeid)
                    changed_hits.update(graph.bits_to_paths(hit))

        # Test files that must be collected: affected ones, and ones with a test that never
        # passed (new file, state deleted, or a test that was deselected until now).
        recorded_files = {test_file_of(n) for n in records}
        affected_files = {test_file_of(n) for n in affected_tests}
        affected_files.update(t for t in test_files if t not in recorded_files)
        for tfile, nodeids in map_data.tests.items():
            if tfile in test_files and any(n not in records for n in nodeids):
                affected_files.add(tfile)

        plan.affected_files = affected_files
        plan.changed = sorted(changed_hits)
        return plan

    def unit_digests(self, plan: Plan, rel: str) -> dict[str, str]:
        """Body digest of each function and method of `rel` now (import_time.file_facts)."""
        cache = plan.units
        if rel not in cache:
            out: dict[str, str] = {}
            digest = plan.digests.get(rel)
            if digest is not None:
                parsed = _parse_all({rel: digest}, plan.files, plan.map_data.parsed)[digest]
                for fn in parsed.facts.funcs:  # a name defined twice (if/else): both bodies
                    out[fn.qualname] = out[fn.qualname] + fn.body_digest if fn.qualname in out else fn.body_digest
            cache[rel] = out
        return cache[rel]

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
            if fbits & content and (
                fbits & imports or self.unit_digests(plan, rel).get(qualname, NOT_A_FUNCTION) != digest
            ):
                bits |= fbits
        return bits

    # -- finish ----------------------------------------------------------------------
    def finish(
        self,
        plan: Plan,
        outcomes: dict[str, str],
        collected: dict[str, list[str]],
        reaches: dict[str, list[str] | None] | None = None,
    ) -> None:
        """Record the session: tests that ran and passed (or were skipped) get today's digests
        and the reach this run recorded for them (`reaches`; None or absent: unknown).

        A test that failed, errored, or did not complete keeps its old record, so it stays
        selected; a test that did not run and was not affected gets today's digests too
        (its closure is unchanged, so both records mean the same thing).
        """
        reaches = reaches or {}
        new_gid = generation_id(plan.digests)
        tests: dict[str, str] = {}
        kept_reach: dict[str, tuple[ReachEntry, ...]] = {}

        def passed_now(nodeid: str) -> None:
            tests[nodeid] = new_gid
            reach = reaches.get(nodeid)
            if reach is not None:
                try:
                    kept_reach[nodeid] = self._with_digests(plan, [parse_reach_entry(e) for e in reach])
                except RecordError:
                    pass  # not the recorder's form: unknown reach, the static closure counts

        for nodeid, gid in plan.records.items():
            if test_file_of(nodeid) not in plan.test_files:
                continue  # the test file is gone: forget its tests
            outcome = outcomes.get(nodeid)
            if outcome in OK_OUTCOMES:
                passed_now(nodeid)
                continue
            tests[nodeid] = new_gid if outcome is None and nodeid not in plan.affected_tests else gid
            if nodeid in plan.reaches:
                kept_reach[nodeid] = plan.reaches[nodeid]
        for nodeid, outcome in outcomes.items():
            if nodeid not in tests and outcome in OK_OUTCOMES and test_file_of(nodeid) in plan.test_files:
                passed_now(nodeid)
        kept = set(tests.values())
        generations = {gid: plan.generations[gid] for gid in kept if gid != new_gid}
        imports = {gid: imp for gid, imp in plan.imports_loaded.items() if gid in kept}
        if new_gid in kept:
            generations[new_gid] = plan.digests
            # Same contents, same import digests: a no-change session reuses them.
            imports[new_gid] = imports.get(new_gid) or self.import_digests(plan)
        save_state = bool(tests or plan.records)
        ours = store.State(generations, tests, kept_reach, imports)

        map_data = plan.map_data
        dirty = plan.map_dirty
        for tfile, nodeids in collected.items():
            if map_data.tests.get(tfile) != tuple(sorted(nodeids)):
                map_data.tests[tfile] = tuple(sorted(nodeids))
                dirty = True
        for tfile in list(map_data.tests):
            if tfile not in plan.test_files:
                del map_data.tests[tfile]
                dirty = True
        if dirty:
            # Closures are not stored (they grow as files x tests); `python -m
            # testharness.remote_select TEST_FILE` prints one from the stored graph.
            for tfile in plan.test_files:
                map_data.tests.setdefault(tfile, ())
        if not (save_state or dirty):
            return
        # Another session may have saved since this one loaded: merge onto what is there now.
        with store.locked(self.files):
            if save_state:
                theirs, _ = store.load_state(self.files.state_file)  # its warning was shown at plan time
                base = store.State(plan.generations, plan.records, plan.reaches, plan.imports_loaded)
                store.save_state(self.files.state_file, store.merge_state(base, ours, theirs, set(outcomes)))
            if dirty:
                on_disk, _ = store.load_map(self.files.map_file)
                if on_disk is not None:
                    merged = store.merge_map_tests(plan.map_tests_loaded, map_data.tests, on_disk.tests, set(collected))
                    map_data.tests = {t: e for t, e in merged.items() if t in plan.test_files}
                store.save_map(self.files.map_file, map_data)

    def _with_digests(self, plan: Plan, reach: list[ReachEntry]) -> tuple[ReachEntry, ...]:
        """Reach entries as stored: a function that ran remotely gets its body digest; one
        of a file outside the scanned tree counts whole."""
        out: set[ReachEntry] = set()
        for entry in reach:
            if not isinstance(entry, RanFunction):
                out.add(entry)
            elif entry.path in plan.digests:
                digest = self.unit_digests(plan, entry.path).get(entry.qualname)
                # Module level and class bodies: import-time code, which import digests cover.
                out.add(
                    RanFunction(entry.path, entry.qualname, digest)
                    if digest
                    else RanFunction(entry.path, MODULE_LEVEL, NOT_A_FUNCTION)
                )
            else:
                out.add(SentModule(entry.path))
        return sorted_reach(out)


NOT_A_FUNCTION = "-"  # the digest recorded for import-time code that ran remotely
MODULE_LEVEL = "<module>"


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


def _parse_all(
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
    "from testharness.remote_select.engine import _read_chunk; "
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


def _graph_from_deps(digests: dict[str, str], deps: dict[str, list[str]]) -> Graph:
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


def describe(plan: Plan) -> str:
    """The one header line shown under --testmon."""
    n = len(plan.affected_tests)
    if not plan.records:
        return "remote-select: no passing record yet; every test is selected (seeding)"
    if not n:
        extra = len(plan.affected_files)
        tail = f"; {extra} test file(s) with tests that never passed" if extra else ""
        return f"remote-select: no remote-affecting change{tail}"
    shown = ", ".join(plan.changed[:5]) + (f" (+{len(plan.changed) - 5} more)" if len(plan.changed) > 5 else "")
    files = len({test_file_of(t) for t in plan.affected_tests})
    return f"remote-select: {n} test(s) in {files} file(s) added because of changes in: {shown or 'deleted files'}"
