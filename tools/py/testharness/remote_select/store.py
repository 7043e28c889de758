"""The two files of remote-aware selection, read leniently and written atomically.

`.nrl_remote_map.json`  : the import graph (per file: digest, direct deps; parse cache by
                          content digest; per test file: closure and known node ids).
`.nrl_remote_state.json`: per test node id, the content digests seen when it last passed
                          and, when recorded, its run-time reach (the project files whose
                          code it sent to Ray workers; see reach.py). Digest sets and reach
                          lists are shared ("generations", "reaches") so 2,000 tests that
                          passed in the same session store one copy.

Both use repo-relative POSIX paths only, so a moved checkout or a container mount keeps
them valid. A file that is missing, corrupted or from another format version is ignored
with one warning line (the caller then re-seeds, and the next save overwrites it); it never
raises. Something else at the path (a directory) is moved aside to `<name>.corrupt-<stamp>`.

Sessions that run at the same time each merge their results into what is on disk when
they finish (`merge_state`, `merge_map_tests`: pure), under an exclusive lock
(`locked`), so none loses the other's records.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Collection, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

from testharness.atomic_io import write_text_atomic
from testharness.state_files import exclusive, move_aside, timestamp

MAP_NAME = ".nrl_remote_map.json"
STATE_NAME = ".nrl_remote_state.json"
MAP_FORMAT = "testharness.remote_select.map"
STATE_FORMAT = "testharness.remote_select.state"
VERSION = 3  # of the state file
MAP_VERSION = 4  # of the map file: 4 stopped counting imports under `if TYPE_CHECKING:`


def write_json_atomic(path: Path, data: Any) -> None:
    write_text_atomic(path, json.dumps(data, separators=(",", ":"), sort_keys=True) + "\n")


def _load(path: Path, fmt: str, version: int) -> tuple[dict[str, Any] | None, str | None]:
    """(data, None) when valid, (None, None) when absent, (None, warning) otherwise."""
    if os.path.lexists(path) and not path.is_file():
        # A directory (or a FIFO: reading would block) is never replaced by a save: move it.
        what = "a directory" if path.is_dir() else "not a regular file"
        try:
            moved = move_aside(path, timestamp())
        except OSError as exc:
            return None, f"{path.name} is {what} and could not be moved aside ({exc.strerror or exc}); remove it by hand"
        return None, f"{path.name} is {what}; moved it to {moved.name}, rebuilding it"
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None, None
    except UnicodeDecodeError:
        return None, f"{path.name} is corrupted (not UTF-8 text); rebuilding it"
    except OSError as exc:
        return None, f"{path.name} is unreadable ({exc.__class__.__name__}); rebuilding it"
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        return None, f"{path.name} is corrupted (not JSON); rebuilding it"
    if not isinstance(data, dict) or data.get("format") != fmt:
        return None, f"{path.name} is not a {fmt} file; rebuilding it"
    if data.get("version") != version:
        return None, f"{path.name} has format version {data.get('version')!r}, expected {version}; rebuilding it"
    return data, None


def _is_str_map(value: Any) -> bool:
    return isinstance(value, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in value.items())


class State:
    """In-memory form of the state file.

    generations: gid -> {path: content digest};  imports: gid -> {path: import digest}
    (import_time.py; absent for a generation: every content change counts as import-time);
    tests: nodeid -> gid (last seen passing);
    reaches: nodeid -> sorted files reached remotely (absent: unknown, use the static closure).
    """

    def __init__(
        self,
        generations: dict[str, dict[str, str]] | None = None,
        tests: dict[str, str] | None = None,
        reaches: dict[str, tuple[str, ...]] | None = None,
        imports: dict[str, dict[str, str]] | None = None,
    ):
        self.generations = generations or {}
        self.tests = tests or {}
        self.reaches = reaches or {}
        self.imports = imports or {}


def _reach_id(files: tuple[str, ...]) -> str:
    return hashlib.blake2b("\n".join(files).encode(), digest_size=8).hexdigest()


def load_state(root: Path) -> tuple[State, str | None]:
    data, warning = _load(root / STATE_NAME, STATE_FORMAT, VERSION)
    if data is None:
        return State(), warning
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
        or not all(isinstance(v, list) and all(isinstance(x, str) for x in v) for v in lists.values())
    ):
        return State(), f"{STATE_NAME} has an unexpected structure; rebuilding it"
    assert isinstance(tests, dict) and isinstance(reach_ids, dict)
    # A record pointing at a missing generation is unusable: treat the test as never passed.
    tests = {nid: gid for nid, gid in tests.items() if gid in gens}
    # An unknown reach id only costs precision: that test falls back to its static closure.
    reaches = {nid: tuple(lists[rid]) for nid, rid in reach_ids.items() if nid in tests and rid in lists}
    imports = {gid: imp for gid, imp in imports.items() if gid in gens}
    return State(gens, tests, reaches, imports), None


def save_state(root: Path, state: State) -> None:
    lists: dict[str, list[str]] = {}
    reach_ids: dict[str, str] = {}
    for nodeid, files in state.reaches.items():
        rid = _reach_id(files)
        lists[rid] = list(files)
        reach_ids[nodeid] = rid
    write_json_atomic(
        root / STATE_NAME,
        {
            "format": STATE_FORMAT,
            "version": VERSION,
            "generations": state.generations,
            "imports": state.imports,
            "tests": state.tests,
            "reach_lists": lists,
            "reach": reach_ids,
        },
    )


class MapData:
    """In-memory form of the map file."""

    def __init__(
        self,
        config: str = "",
        files: dict[str, str] | None = None,
        parsed: dict[str, dict[str, Any]] | None = None,
        deps: dict[str, list[str]] | None = None,
        tests: dict[str, dict[str, list[str]]] | None = None,
    ):
        self.config = config
        self.files = files or {}
        self.parsed = parsed or {}  # content digest -> graph.parse_file() result
        self.deps = deps or {}
        self.tests = tests or {}

    def to_json(self) -> dict[str, Any]:
        return {
            "format": MAP_FORMAT,
            "version": MAP_VERSION,
            "config": self.config,
            "files": self.files,
            "deps": self.deps,
            "tests": self.tests,
            "parse_cache": self.parsed,
        }


def load_map(root: Path) -> tuple[MapData | None, str | None]:
    data, warning = _load(root / MAP_NAME, MAP_FORMAT, MAP_VERSION)
    if data is None:
        return None, warning
    try:
        files, parsed, deps, tests = data["files"], data["parse_cache"], data["deps"], data["tests"]
        ok = (
            _is_str_map(files)
            and isinstance(parsed, dict)
            and all(_is_parsed(v) for v in parsed.values())
            and isinstance(deps, dict)
            and all(isinstance(v, list) and all(isinstance(x, str) for x in v) for v in deps.values())
            # Entries are checked where they are used (a bad one is skipped), not here:
            # closures are the bulk of the file and the no-change path must stay fast.
            and isinstance(tests, dict)
            and all(isinstance(t, dict) for t in tests.values())
            and isinstance(data.get("config"), str)
        )
    except KeyError:
        ok = False
    if not ok:
        return None, f"{MAP_NAME} has an unexpected structure; rebuilding it"
    return MapData(str(data["config"]), files, parsed, deps, tests), None


def _is_parsed(value: Any) -> bool:
    return (
        isinstance(value, dict)
        and isinstance(value.get("refs"), list)
        and all(isinstance(x, str) for x in value["refs"])
        and isinstance(value.get("skel"), str)
        and isinstance(value.get("top"), list)
        and isinstance(value.get("funcs"), list)
        and all(
            isinstance(f, list) and len(f) == 4 and isinstance(f[0], str) and isinstance(f[1], str) and isinstance(f[3], list)
            for f in value["funcs"]
        )
    )


def save_map(root: Path, data: MapData) -> None:
    write_json_atomic(root / MAP_NAME, data.to_json())


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


def _records(state: State) -> dict[str, tuple[str, tuple[str, ...] | None]]:
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
    base: Mapping[str, dict[str, Any]],
    ours: Mapping[str, dict[str, Any]],
    theirs: Mapping[str, dict[str, Any]],
    collected: Collection[str],
) -> dict[str, dict[str, Any]]:
    """The map's per-test-file entries: this session's for the files it collected, else
    whichever session changed them (`merge3`)."""
    return merge3(base, ours, theirs, collected)


@contextmanager
def locked(root: Path, timeout: float = 60.0) -> Iterator[None]:
    """Hold the lock that guards both files (`<state file>.lock`) for a read-merge-write."""
    with exclusive(root / STATE_NAME, timeout=timeout):
        yield
