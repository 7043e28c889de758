"""The two files of remote-aware selection, read leniently and written atomically.

The map file   : the import graph (per file: digest, stat signature, direct deps; per test
                 file: its known node ids); beside it `<map>.parse-cache.json`, what was
                 read from each file, by content digest (ParseCache).
The state file : per test node id, the content digests seen when it last passed
                          and, when recorded, its run-time reach (the project files whose
                          code it sent to Ray workers; see reach.py). Digest sets and reach
                          lists are shared ("generations", "reaches") so 2,000 tests that
                          passed in the same session store one copy.

Both use repo-relative POSIX paths only, so a moved checkout or a container mount keeps
them valid. A file that is missing, damaged or from another format version is ignored
with one warning line (the caller then re-seeds, and the next save overwrites it); it never
raises. A damaged one (not JSON, nested too deep, malformed, a directory) is moved aside to
`<name>.corrupt-<stamp>` (state_files.JsonFormat).

Sessions that run at the same time each merge their results into what is on disk when
they finish (`merge_state`, `merge_map_tests`: pure), under an exclusive lock
(`locked`), so none loses the other's records.
"""

from __future__ import annotations

import hashlib
from collections.abc import Collection, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NamedTuple, TypeVar

from testharness.atomic_io import write_json_atomic
from testharness.settings import Settings
from testharness.state_files import JsonFormat, exclusive

from .records import (
    ParsedFile,
    ReachEntry,
    RecordError,
    format_reach,
    parse_parsed_file,
    parse_stored_reach,
    parsed_file_to_json,
)


class StateFiles(NamedTuple):
    """Where the two files live: [tool.testharness] remote_map_file / remote_state_file
    (this repository: `.nrl_remote_map.json` / `.nrl_remote_state.json`)."""

    map_file: Path
    state_file: Path

    @classmethod
    def of(cls, settings: Settings) -> StateFiles:
        return cls(settings.remote_map_file, settings.remote_state_file)


MAP_FORMAT = "testharness.remote_select.map"
PARSE_CACHE_FORMAT = "testharness.remote_select.parse_cache"
STATE_FORMAT = "testharness.remote_select.state"
VERSION = 3  # of the state file
# Of the map file: 4 stopped counting imports under `if TYPE_CHECKING:`; 5 resolves relative
# `import_module(".x", package=...)` names (cached parses of version 4 lack them); 6 reads
# files without `ast` (lexical.py: other digests) and keeps the parse cache in its own file.
MAP_VERSION = 6


def _is_str_map(value: Any) -> bool:
    return isinstance(value, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in value.items())


def _is_str_list(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(x, str) for x in value)


class State:
    """In-memory form of the state file.

    generations: gid -> {path: content digest};  imports: gid -> {path: import digest}
    (import_time.py; absent for a generation: every content change counts as import-time);
    tests: nodeid -> gid (last seen passing);
    reaches: nodeid -> what it reached remotely, sorted by text form (absent: unknown, use the
    static closure).
    """

    def __init__(
        self,
        generations: dict[str, dict[str, str]] | None = None,
        tests: dict[str, str] | None = None,
        reaches: dict[str, tuple[ReachEntry, ...]] | None = None,
        imports: dict[str, dict[str, str]] | None = None,
    ):
        self.generations = generations or {}
        self.tests = tests or {}
        self.reaches = reaches or {}
        self.imports = imports or {}


def _reach_id(entries: list[str]) -> str:
    return hashlib.blake2b("\n".join(entries).encode(), digest_size=8).hexdigest()


def _state_from_json(data: dict[str, Any]) -> State:
    gens, tests = data.get("generations"), data.get("tests")
    lists, reach_ids = data.get("reach_lists", {}), data.get("reach", {})
    imports = data.get("imports", {})
    if (
        not isinstance(gens, dict)
        or not all(_is_str_map(g) for g in gens.values())
        or not isinstance(imports, dict)
        or not all(_is_str_map(g) for g in imports.values())
        or not _is_str_map(tests)
        or not _is_str_map(reach_ids)
        or not isinstance(lists, dict)
    ):
        raise RecordError("'generations', 'imports', 'tests', 'reach' and 'reach_lists' must be maps of strings")
    assert isinstance(tests, dict) and isinstance(reach_ids, dict)
    parsed_lists = {rid: parse_stored_reach(entries) for rid, entries in lists.items()}
    # A record pointing at a missing generation is unusable: treat the test as never passed.
    tests = {nid: gid for nid, gid in tests.items() if gid in gens}
    # An unknown reach id only costs precision: that test falls back to its static closure.
    reaches = {nid: parsed_lists[rid] for nid, rid in reach_ids.items() if nid in tests and rid in parsed_lists}
    imports = {gid: imp for gid, imp in imports.items() if gid in gens}
    return State(gens, tests, reaches, imports)


STATE = JsonFormat(STATE_FORMAT, VERSION, _state_from_json)


def load_state(path: Path) -> tuple[State, str | None]:
    state, warning = STATE.load(path)
    return (State() if state is None else state), warning


def save_state(path: Path, state: State) -> None:
    lists: dict[str, list[str]] = {}
    reach_ids: dict[str, str] = {}
    for nodeid, reach in state.reaches.items():
        entries = format_reach(reach)
        rid = _reach_id(entries)
        lists[rid] = entries
        reach_ids[nodeid] = rid
    write_json_atomic(
        path,
        compact=True,
        data={
            "format": STATE_FORMAT,
            "version": VERSION,
            "generations": state.generations,
            "imports": state.imports,
            "tests": state.tests,
            "reach_lists": lists,
            "reach": reach_ids,
        },
    )


class ParseCache:
    """parsing.parse_file() results by content digest, kept in their own file next to the map
    (`<map>.parse-cache.json`): content-addressed, so never stale, and a file CI can keep
    between jobs. Loaded only when a file must be read (a change, a cold build), and each
    entry parsed only when asked for; a malformed entry is a miss (that file is read again)."""

    def __init__(self, path: Path | None = None, entries: dict[str, ParsedFile] | None = None):
        self.path = path
        self._raw: dict[str, Any] | None = None if path is not None else {}
        self._parsed: dict[str, ParsedFile] = dict(entries or {})
        self.changed = bool(entries)
        self.warning: str | None = None

    def _load(self) -> dict[str, Any]:
        if self._raw is None:
            assert self.path is not None
            entries, self.warning = PARSE_CACHE.load(self.path)
            self._raw = entries or {}
        return self._raw

    def take_warning(self) -> str | None:
        """The one line about a damaged cache file, once (None: none, or already taken)."""
        warning, self.warning = self.warning, None
        return warning

    def get(self, digest: str) -> ParsedFile | None:
        hit = self._parsed.get(digest)
        if hit is None:
            raw = self._load().get(digest)
            if raw is not None:
                try:
                    hit = self._parsed[digest] = parse_parsed_file(raw)
                except RecordError:
                    return None
        return hit

    def __setitem__(self, digest: str, parsed: ParsedFile) -> None:
        self._parsed[digest] = parsed
        self.changed = True

    def __contains__(self, digest: object) -> bool:
        return digest in self._parsed or (isinstance(digest, str) and self.get(digest) is not None)

    def to_json(self, keep: Collection[str]) -> dict[str, Any]:
        """The entries of the digests in `keep` (those of the tree now), as the file stores them."""
        raw = self._load()
        entries: dict[str, Any] = {}
        for digest in keep:
            if digest in self._parsed:
                entries[digest] = parsed_file_to_json(self._parsed[digest], tuples=True)
            elif digest in raw:
                entries[digest] = raw[digest]
        return {"format": PARSE_CACHE_FORMAT, "version": MAP_VERSION, "entries": entries}


def _cache_entries(data: dict[str, Any]) -> dict[str, Any]:
    entries = data.get("entries")
    if not isinstance(entries, dict):
        raise RecordError("'entries' must be an object")
    return entries  # each one is checked when asked for (a malformed one is a miss)


PARSE_CACHE = JsonFormat(PARSE_CACHE_FORMAT, MAP_VERSION, _cache_entries)


def parse_cache_file(map_file: Path) -> Path:
    return map_file.with_name(f"{map_file.stem}.parse-cache{map_file.suffix}")


class MapData:
    """In-memory form of the map file.

    config: the selection config's fingerprint; files: path -> content digest; parsed:
    content digest -> parsing.parse_file() result (ParseCache: its own file); deps: path ->
    direct dependencies; tests: test file -> its node ids at the last collection (stored as
    {"nodeids": [...]}); stats: path -> its stat signature when its digest was taken
    (scan.hash_files reads a file again only when that changed).
    """

    def __init__(
        self,
        config: str = "",
        files: dict[str, str] | None = None,
        parsed: ParseCache | None = None,
        deps: dict[str, list[str]] | None = None,
        tests: dict[str, tuple[str, ...]] | None = None,
        stats: dict[str, str] | None = None,
    ):
        self.config = config
        self.files = files or {}
        self.parsed = parsed if parsed is not None else ParseCache()
        self.deps = deps or {}
        self.tests = tests or {}
        self.stats = stats or {}

    def to_json(self) -> dict[str, Any]:
        return {
            "format": MAP_FORMAT,
            "version": MAP_VERSION,
            "config": self.config,
            "files": self.files,
            "deps": self.deps,
            "tests": {tfile: {"nodeids": list(nodeids)} for tfile, nodeids in self.tests.items()},
            "stats": self.stats,
        }


def load_map(path: Path) -> tuple[MapData | None, str | None]:
    map_data, warning = MAP.load(path)
    if map_data is not None:
        map_data.parsed = ParseCache(parse_cache_file(path))
    return map_data, warning


def _map_data(data: dict[str, Any]) -> MapData:
    """The map file's JSON as a MapData (its parse cache not attached); RecordError (one
    line) when something is malformed."""
    missing = [key for key in ("config", "files", "deps", "tests") if key not in data]
    if missing:
        raise RecordError(f"no {missing[0]!r}")
    config, files, deps, tests = data["config"], data["files"], data["deps"], data["tests"]
    stats = data.get("stats", {})
    if not isinstance(config, str) or not _is_str_map(files) or not _is_str_map(stats):
        raise RecordError("'config' must be a string, 'files' and 'stats' maps of strings")
    if not isinstance(deps, dict) or not all(_is_str_list(v) for v in deps.values()):
        raise RecordError("'deps' must map paths to lists of paths")
    if not isinstance(tests, dict):
        raise RecordError("'tests' must be an object")
    nodeids: dict[str, tuple[str, ...]] = {}
    for tfile, entry in tests.items():
        if not isinstance(entry, dict) or not _is_str_list(entry.get("nodeids")):
            raise RecordError(f"the entry of test file {tfile!r} must be {{'nodeids': [...]}}")
        nodeids[tfile] = tuple(entry["nodeids"])
    return MapData(config, files, None, deps, nodeids, stats)


MAP = JsonFormat(MAP_FORMAT, MAP_VERSION, _map_data)


def save_map(path: Path, data: MapData) -> None:
    write_json_atomic(path, data.to_json(), compact=True)
    cache = data.parsed
    if cache.changed:  # new entries (and the ones of files gone are dropped)
        write_json_atomic(parse_cache_file(path), cache.to_json(set(data.files.values())), compact=True)
        cache.changed = False


# -- concurrent sessions -------------------------------------------------------------------
K = TypeVar("K")
V = TypeVar("V")
_ABSENT: Any = object()


def merge3(base: Mapping[K, V], ours: Mapping[K, V], theirs: Mapping[K, V], mine: Collection[K]) -> dict[K, V]:
    """Three-way merge of one session's entries (`ours`, made from `base`, what it loaded)
    into what is on disk now (`theirs`); an absent key is a deleted entry.

    Keys in `mine` (what this session decided: the tests it ran) take ours; any other key
    takes theirs when another session changed it since `base`, else ours.
    """
    out: dict[K, V] = {}
    for key in {*base, *ours, *theirs}:
        theirs_value = theirs.get(key, _ABSENT)
        if key in mine or theirs_value == base.get(key, _ABSENT):
            value = ours.get(key, _ABSENT)
        else:
            value = theirs_value
        if value is not _ABSENT:
            out[key] = value
    return out


def _records(state: State) -> dict[str, tuple[str, tuple[ReachEntry, ...] | None]]:
    return {nid: (gid, state.reaches.get(nid)) for nid, gid in state.tests.items()}


def merge_state(base: State, ours: State, theirs: State, ran: Collection[str]) -> State:
    """This session's state (`ours`, made from `base`) merged onto the file's state now.

    A test's record is its generation and its reach, taken whole: from this session for the
    tests it ran (`ran`), else from whichever session changed it (`merge3`). Generations and
    import digests follow the records that are kept (a generation id is a digest of its
    content, so both sides agree on what one means).
    """
    merged = merge3(_records(base), _records(ours), _records(theirs), ran)
    tests = {nid: gid for nid, (gid, _) in merged.items()}
    reaches = {nid: reach for nid, (_, reach) in merged.items() if reach is not None}
    kept = set(tests.values())
    generations = {gid: gen for side in (theirs, ours) for gid, gen in side.generations.items() if gid in kept}
    imports = {gid: imp for side in (theirs, ours) for gid, imp in side.imports.items() if gid in kept}
    return State(generations, tests, reaches, imports)


def merge_map_tests(
    base: Mapping[str, tuple[str, ...]],
    ours: Mapping[str, tuple[str, ...]],
    theirs: Mapping[str, tuple[str, ...]],
    collected: Collection[str],
) -> dict[str, tuple[str, ...]]:
    """The map's per-test-file entries: this session's for the files it collected, else
    whichever session changed them (`merge3`)."""
    return merge3(base, ours, theirs, collected)


@contextmanager
def locked(files: StateFiles, timeout: float = 60.0) -> Iterator[None]:
    """Hold the lock that guards both files (`<state file>.lock`) for a read-merge-write."""
    with exclusive(files.state_file, timeout=timeout):
        yield
