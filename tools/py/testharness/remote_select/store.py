"""The two files of remote-aware selection, read leniently and written atomically.

`.nrl_remote_map.json`  : the import graph (per file: digest, direct deps; parse cache by
                          content digest; per test file: closure and known node ids).
`.nrl_remote_state.json`: per test node id, the content digests seen when it last passed.
                          Digest sets are shared ("generations") so 2,000 tests that passed
                          in the same session store one copy.

Both use repo-relative POSIX paths only, so a moved checkout or a container mount keeps
them valid. A file that is missing, corrupted or from another format version is ignored
with one warning line (the caller then re-seeds); it never raises.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from testharness.atomic_io import write_text_atomic

MAP_NAME = ".nrl_remote_map.json"
STATE_NAME = ".nrl_remote_state.json"
MAP_FORMAT = "testharness.remote_select.map"
STATE_FORMAT = "testharness.remote_select.state"
VERSION = 1


def write_json_atomic(path: Path, data: Any) -> None:
    write_text_atomic(path, json.dumps(data, separators=(",", ":"), sort_keys=True) + "\n")


def _load(path: Path, fmt: str) -> tuple[dict[str, Any] | None, str | None]:
    """(data, None) when valid, (None, None) when absent, (None, warning) otherwise."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None, None
    except (OSError, UnicodeDecodeError) as exc:
        return None, f"{path.name} is unreadable ({exc.__class__.__name__}); rebuilding it"
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        return None, f"{path.name} is corrupted (not JSON); rebuilding it"
    if not isinstance(data, dict) or data.get("format") != fmt:
        return None, f"{path.name} is not a {fmt} file; rebuilding it"
    if data.get("version") != VERSION:
        return None, f"{path.name} has format version {data.get('version')!r}, expected {VERSION}; rebuilding it"
    return data, None


def _is_str_map(value: Any) -> bool:
    return isinstance(value, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in value.items())


def load_state(root: Path) -> tuple[dict[str, dict[str, str]], dict[str, str], str | None]:
    """(generations gid -> {path: digest}, tests nodeid -> gid, warning or None)."""
    data, warning = _load(root / STATE_NAME, STATE_FORMAT)
    if data is None:
        return {}, {}, warning
    gens, tests = data.get("generations"), data.get("tests")
    if not isinstance(gens, dict) or not all(_is_str_map(g) for g in gens.values()) or not _is_str_map(tests):
        return {}, {}, f"{STATE_NAME} has an unexpected structure; rebuilding it"
    assert isinstance(tests, dict)
    # A record pointing at a missing generation is unusable: treat the test as never passed.
    tests = {nid: gid for nid, gid in tests.items() if gid in gens}
    return gens, tests, None


def save_state(root: Path, generations: dict[str, dict[str, str]], tests: dict[str, str]) -> None:
    write_json_atomic(
        root / STATE_NAME,
        {"format": STATE_FORMAT, "version": VERSION, "generations": generations, "tests": tests},
    )


class MapData:
    """In-memory form of the map file."""

    def __init__(
        self,
        config: str = "",
        files: dict[str, str] | None = None,
        refs: dict[str, list[str]] | None = None,
        deps: dict[str, list[str]] | None = None,
        tests: dict[str, dict[str, list[str]]] | None = None,
    ):
        self.config = config
        self.files = files or {}
        self.refs = refs or {}
        self.deps = deps or {}
        self.tests = tests or {}

    def to_json(self) -> dict[str, Any]:
        return {
            "format": MAP_FORMAT,
            "version": VERSION,
            "config": self.config,
            "files": self.files,
            "deps": self.deps,
            "tests": self.tests,
            "parse_cache": self.refs,
        }


def load_map(root: Path) -> tuple[MapData | None, str | None]:
    data, warning = _load(root / MAP_NAME, MAP_FORMAT)
    if data is None:
        return None, warning
    try:
        files, refs, deps, tests = data["files"], data["parse_cache"], data["deps"], data["tests"]
        ok = (
            _is_str_map(files)
            and isinstance(refs, dict)
            and all(isinstance(v, list) and all(isinstance(x, str) for x in v) for v in refs.values())
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
    return MapData(str(data["config"]), files, refs, deps, tests), None


def save_map(root: Path, data: MapData) -> None:
    write_json_atomic(root / MAP_NAME, data.to_json())
