"""What a session's selection plan holds (pure: no pytest, no Ray): what the engine adds to
testmon's selection at configure time, and what it records at the end."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field

from . import store
from .graph import Graph
from .import_time import import_digests
from .parsing import parse_all
from .records import ReachEntry

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

    def import_digests(self) -> dict[str, str]:
        """Import digests of the current tree (import_time.py), computed once per plan."""
        if self.imports is None:
            parsed = parse_all(self.digests, self.files, self.map_data.parsed)
            self.imports = import_digests({rel: parsed[d].facts for rel, d in self.digests.items()})
        return self.imports

    def unit_digests(self, rel: str) -> dict[str, str]:
        """Body digest of each function and method of `rel` now (import_time.file_facts)."""
        cache = self.units
        if rel not in cache:
            out: dict[str, str] = {}
            digest = self.digests.get(rel)
            if digest is not None:
                parsed = parse_all({rel: digest}, self.files, self.map_data.parsed)[digest]
                for fn in parsed.facts.funcs:  # a name defined twice (if/else): both bodies
                    out[fn.qualname] = out[fn.qualname] + fn.body_digest if fn.qualname in out else fn.body_digest
            cache[rel] = out
        return cache[rel]

    def must_run(self, nodeid: str) -> bool:
        """True when this test has to run whatever testmon says."""
        if test_file_of(nodeid) not in self.test_files:
            return False  # outside the test roots: not tracked, testmon decides
        return nodeid not in self.records or nodeid in self.affected_tests


def describe(plan: Plan) -> str:
    """The one header line shown under --testmon."""
    n = len(plan.affected_tests)
    if not plan.records:
        if plan.messages:  # the warnings above say which file and why
            return "remote-select: every test is selected: its files could not be used (rebuilt when this run ends)"
        return "remote-select: no passing record yet; every test is selected (seeding)"
    if not n:
        extra = len(plan.affected_files)
        tail = f"; {extra} test file(s) with tests that never passed" if extra else ""
        return f"remote-select: no remote-affecting change{tail}"
    shown = ", ".join(plan.changed[:5]) + (f" (+{len(plan.changed) - 5} more)" if len(plan.changed) > 5 else "")
    files = len({test_file_of(t) for t in plan.affected_tests})
    return f"remote-select: {n} test(s) in {files} file(s) added because of changes in: {shown or 'deleted files'}"
