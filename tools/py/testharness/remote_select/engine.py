"""Remote-aware selection engine (pure: no pytest, no Ray).

A test must run when some file of its static closure (its test file, the project modules
it reaches through imports and dotted strings, its conftest chain) has a content digest
different from the one recorded when that test last passed, or when it has no record.
Everything else is left to pytest-testmon. The pytest adapter only *adds* tests to
testmon's selection; this module never decides to skip anything.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path

from . import store
from .config import SelectConfig
from .graph import Graph, build_graph, hash_files, is_test_file, parse_refs, scan_files

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
    test_files: set[str]  # test files present now (under the test roots)
    affected_files: set[str]  # must be collected (some test may need to run)
    affected_tests: set[str]  # recorded tests whose closure changed
    records: dict[str, str]  # nodeid -> generation id (as loaded)
    generations: dict[str, dict[str, str]]
    map_data: store.MapData
    map_dirty: bool
    graph: Graph | None
    messages: list[str] = field(default_factory=list)
    changed: list[str] = field(default_factory=list)  # changed files that affect a test

    def must_run(self, nodeid: str) -> bool:
        """True when this test has to run whatever testmon says."""
        if test_file_of(nodeid) not in self.test_files:
            return False  # outside the test roots: not tracked, testmon decides
        return nodeid not in self.records or nodeid in self.affected_tests


class RemoteSelector:
    """Build a Plan at configure time; record results at session end."""

    def __init__(self, root: Path, cfg: SelectConfig):
        self.root = root
        self.cfg = cfg

    # -- graph -----------------------------------------------------------------------
    def _graph(self, digests: dict[str, str], files: dict[str, str], old: store.MapData | None) -> tuple[Graph, store.MapData, bool]:
        """Graph for the current tree, reusing the old map's parse cache and deps."""
        fp = self.cfg.fingerprint()
        if old is not None and old.config == fp and old.files == digests and set(old.deps) == set(digests):
            return _graph_from_deps(digests, old.deps), old, False
        refs: dict[str, list[str]] = {}
        cache = old.refs if old is not None else {}
        for rel, dig in digests.items():
            if dig in refs:
                continue
            hit = cache.get(dig)
            if hit is None:
                try:
                    with open(files[rel], "rb") as fh:
                        hit = parse_refs(fh.read())
                except OSError:
                    hit = []
            refs[dig] = hit
        graph = build_graph(self.cfg, digests, refs)
        deps = {graph.nodes[i]: [graph.nodes[j] for j in graph.deps[i]] for i in range(graph.n_files)}
        tests = dict(old.tests) if old is not None else {}
        new = store.MapData(config=fp, files=dict(digests), refs=refs, deps=deps, tests=tests)
        return graph, new, True

    # -- plan ------------------------------------------------------------------------
    def plan(self) -> Plan:
        messages: list[str] = []
        old_map, warn = store.load_map(self.root)
        if warn:
            messages.append(warn)
        generations, records, warn = store.load_state(self.root)
        if warn:
            messages.append(warn)

        files = scan_files(str(self.root), self.cfg)
        digests = hash_files(files)
        test_files = {rel for rel in digests if is_test_file(rel, self.cfg)}

        # Files whose content differs from each generation still referenced by a record.
        changed_by_gen: dict[str, set[str]] = {}
        for gid in set(records.values()):
            gen = generations[gid]
            if gen == digests:
                changed_by_gen[gid] = set()
                continue
            diff = {p for p, d in digests.items() if gen.get(p) != d}
            diff.update(p for p in gen if p not in digests)
            changed_by_gen[gid] = diff
        any_change = any(changed_by_gen.values())

        graph: Graph | None = None
        map_data = old_map or store.MapData()
        map_dirty = old_map is None
        if any_change or old_map is None or old_map.files != digests or old_map.config != self.cfg.fingerprint():
            graph, map_data, rebuilt = self._graph(digests, files, old_map)
            map_dirty = map_dirty or rebuilt

        affected_tests: set[str] = set()
        changed_hits: set[str] = set()
        if any_change:
            assert graph is not None
            changed_bits = {gid: graph.bits_of(paths) for gid, paths in changed_by_gen.items()}
            memo: dict[tuple[str, str], int] = {}
            for nodeid, gid in records.items():
                tfile = test_file_of(nodeid)
                key = (tfile, gid)
                hit = memo.get(key)
                if hit is None:
                    # Tests outside the test roots are not tracked (left to testmon).
                    hit = graph.closure_bits(tfile) & changed_bits[gid] if tfile in test_files else 0
                    memo[key] = hit
                if hit:
                    affected_tests.add(nodeid)
                    changed_hits.update(graph.bits_to_paths(hit))

        # Test files that must be collected: affected ones, and ones with a test that never
        # passed (new file, state deleted, or a test that was deselected until now).
        recorded_files = {test_file_of(n) for n in records}
        affected_files = {test_file_of(n) for n in affected_tests}
        affected_files.update(t for t in test_files if t not in recorded_files)
        for tfile, info in map_data.tests.items():
            nodeids = info.get("nodeids")
            if tfile in test_files and isinstance(nodeids, list) and any(n not in records for n in nodeids):
                affected_files.add(tfile)

        plan = Plan(
            digests=digests,
            test_files=test_files,
            affected_files=affected_files,
            affected_tests=affected_tests,
            records=records,
            generations=generations,
            map_data=map_data,
            map_dirty=map_dirty,
            graph=graph,
            messages=messages,
            changed=sorted(p for p in changed_hits),
        )
        return plan

    # -- finish ----------------------------------------------------------------------
    def finish(self, plan: Plan, outcomes: dict[str, str], collected: dict[str, list[str]]) -> None:
        """Record the session: tests that ran and passed (or were skipped) get today's digests.

        A test that failed, errored, or did not complete keeps its old record, so it stays
        selected; a test that did not run and was not affected gets today's digests too
        (its closure is unchanged, so both records mean the same thing).
        """
        new_gid = generation_id(plan.digests)
        tests: dict[str, str] = {}
        for nodeid, gid in plan.records.items():
            if test_file_of(nodeid) not in plan.test_files:
                continue  # the test file is gone: forget its tests
            outcome = outcomes.get(nodeid)
            if outcome in OK_OUTCOMES:
                tests[nodeid] = new_gid
            elif outcome is None and nodeid not in plan.affected_tests:
                tests[nodeid] = new_gid
            else:
                tests[nodeid] = gid
        for nodeid, outcome in outcomes.items():
            if nodeid not in tests and outcome in OK_OUTCOMES and test_file_of(nodeid) in plan.test_files:
                tests[nodeid] = new_gid
        generations = {gid: plan.generations[gid] for gid in set(tests.values()) if gid != new_gid}
        if new_gid in tests.values():
            generations[new_gid] = plan.digests
        if tests or plan.records:
            store.save_state(self.root, generations, tests)

        map_data = plan.map_data
        dirty = plan.map_dirty
        for tfile, nodeids in collected.items():
            old = map_data.tests.get(tfile, {}).get("nodeids")
            if old != sorted(nodeids):
                map_data.tests.setdefault(tfile, {})["nodeids"] = sorted(nodeids)
                dirty = True
        for tfile in list(map_data.tests):
            if tfile not in plan.test_files:
                del map_data.tests[tfile]
                dirty = True
        if dirty:
            # Closures are not stored (they grow as files x tests); `python -m
            # testharness.remote_select TEST_FILE` prints one from the stored graph.
            for tfile in plan.test_files:
                entry = map_data.tests.setdefault(tfile, {})
                entry.setdefault("nodeids", [])
            store.save_map(self.root, map_data)


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
        tail = f"; {extra} test file(s) with never-passed tests collected" if extra else ""
        return f"remote-select: no remote-affecting change{tail}"
    shown = ", ".join(plan.changed[:5]) + (f" (+{len(plan.changed) - 5} more)" if len(plan.changed) > 5 else "")
    files = len({test_file_of(t) for t in plan.affected_tests})
    return f"remote-select: {n} test(s) in {files} file(s) added because of changes in: {shown or 'deleted files'}"
