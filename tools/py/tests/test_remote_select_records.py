"""Typed records of remote-aware selection (remote_select/records.py) and the files they fill.

Files written before the records existed (map version 4, state version 3) must load as
they are; malformed ones are rebuilt with one warning line, never a crash.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from testharness.remote_select import store
from testharness.remote_select.records import (
    ActorModule,
    ActorReport,
    DottedString,
    FromImportRef,
    FunctionFacts,
    ImportRef,
    PathString,
    RanFunction,
    RecordError,
    SentModule,
    format_reach_entry,
    format_ref,
    parse_actor_report,
    parse_parsed_file,
    parse_reach_entry,
    parse_ref,
    parse_stored_reach,
    parsed_file_to_json,
)

# As the writer before typed records left them (one test file, one traced-actor test).
OLD_STATE = {
    "format": "testharness.remote_select.state",
    "version": 3,
    "generations": {"g1": {"pkg/w.py": "d1", "tests/test_w.py": "d2"}},
    "imports": {"g1": {"pkg/w.py": "i1", "tests/test_w.py": "i2"}},
    "tests": {"tests/test_w.py::test_a": "g1", "tests/test_w.py::test_b": "g1"},
    "reach_lists": {"r1": ["@pkg/w.py", "pkg/other.py", "pkg/w.py::W.run#abc", "pkg/w.py::<module>#-"]},
    "reach": {"tests/test_w.py::test_a": "r1"},
}
OLD_PARSED = {
    "refs": ["i:os", "f:1::w", "s:pkg.w.W", "p:x/y.py"],
    "skel": "s1",
    "top": ["W"],
    "funcs": [["W.run", "b1", 0, ["f"]]],
}
OLD_MAP = {
    "format": "testharness.remote_select.map",
    "version": store.MAP_VERSION,  # 6: the parse cache in its own file, stat signatures
    "config": "pkg||tests|test_*.py",
    "files": {"pkg/w.py": "d1"},
    "deps": {"pkg/w.py": []},
    "tests": {"tests/test_w.py": {"nodeids": ["tests/test_w.py::test_a"]}},
    "stats": {"pkg/w.py": "10:1:1:7"},
}
OLD_CACHE = {
    "format": "testharness.remote_select.parse_cache",
    "version": store.MAP_VERSION,
    "entries": {"d1": OLD_PARSED},
}


def _write(path: Path, data: Any) -> Path:
    path.write_text(json.dumps(data))
    return path


@pytest.mark.parametrize(
    ("text", "ref"),
    [
        ("i:a.b", ImportRef("a.b")),
        ("f:0:a.b:c,d", FromImportRef(0, "a.b", ("c", "d"))),
        ("f:1::c", FromImportRef(1, "", ("c",))),
        ("f:2:d:*", FromImportRef(2, "d", ("*",))),
        ("s:pkg.mod.Cls", DottedString("pkg.mod.Cls")),
        ("p:examples/run.py", PathString("examples/run.py")),
    ],
)
def test_import_references_round_trip(text: str, ref: Any) -> None:
    assert parse_ref(text) == ref
    assert format_ref(ref) == text


def test_references_of_different_kinds_never_compare_equal() -> None:
    assert ImportRef("a.b") != DottedString("a.b")
    assert len({ImportRef("a.b"), DottedString("a.b")}) == 2
    assert SentModule("p.py") != ActorModule("p.py")


@pytest.mark.parametrize("text", ["", "x", "i:", "q:a.b", "f:x:a:b", "f:0::b", "f:1", 3, None])
def test_malformed_references_are_rejected_with_one_line(text: Any) -> None:
    with pytest.raises(RecordError) as info:
        parse_ref(text)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize(
    ("text", "entry"),
    [
        ("pkg/w.py", SentModule("pkg/w.py")),
        ("@pkg/w.py", ActorModule("pkg/w.py")),
        ("pkg/w.py::W.run", RanFunction("pkg/w.py", "W.run")),
        ("pkg/w.py::W.run#abc", RanFunction("pkg/w.py", "W.run", "abc")),
        ("pkg/w.py::<module>#-", RanFunction("pkg/w.py", "<module>", "-")),
    ],
)
def test_reach_entries_round_trip(text: str, entry: Any) -> None:
    assert parse_reach_entry(text) == entry
    assert format_reach_entry(entry) == text


@pytest.mark.parametrize("text", ["", "@", "@a::b", "::W.run", "a.py::", "a.py::W#", "a.py#x", ["a"]])
def test_malformed_reach_entries_are_rejected(text: Any) -> None:
    with pytest.raises(RecordError, match="reach entry"):
        parse_reach_entry(text)


def test_a_stored_function_entry_must_carry_its_digest() -> None:
    assert parse_stored_reach(["a.py::f#d"]) == (RanFunction("a.py", "f", "d"),)
    with pytest.raises(RecordError, match="lacks its digest"):
        parse_stored_reach(["a.py::f"])


def test_parsed_files_round_trip_and_reject_bad_function_facts() -> None:
    parsed = parse_parsed_file(OLD_PARSED)
    assert parsed.facts.funcs == (FunctionFacts("W.run", "b1", 0, ("f",)),)
    assert parsed_file_to_json(parsed) == OLD_PARSED
    for bad, reason in [
        ({**OLD_PARSED, "funcs": [["W.run", "b1", 7, []]]}, "kind"),
        ({**OLD_PARSED, "funcs": [["W.run", "b1", 0]]}, "function facts"),
        ({**OLD_PARSED, "top": "W"}, "top"),
        ({k: v for k, v in OLD_PARSED.items() if k != "skel"}, "lacks 'skel'"),
        ({**OLD_PARSED, "refs": ["z:q"]}, "import reference"),
    ]:
        with pytest.raises(RecordError, match=reason):
            parse_parsed_file(bad)


def test_actor_reports_are_parsed_and_malformed_ones_rejected() -> None:
    report = parse_actor_report({"units": ["a.py::f", "a.py::<module>"], "escaped": True})
    assert report == ActorReport((RanFunction("a.py", "f"), RanFunction("a.py", "<module>")), True)
    for bad in [
        None,
        [],
        {"units": "a.py::f"},
        {"units": ["a.py"]},
        {"units": ["a.py::f#d"]},
        {"units": [], "escaped": 1},
    ]:
        with pytest.raises(RecordError):
            parse_actor_report(bad)


def test_a_map_of_version_4_is_rebuilt_with_one_warning(tmp_path: Path) -> None:
    map_data, warning = store.load_map(_write(tmp_path / "map.json", {**OLD_MAP, "version": 4}))
    assert map_data is None and warning == f"map.json has format version 4, expected {store.MAP_VERSION}; rebuilding it"


def test_the_parse_cache_is_read_lazily_and_a_malformed_entry_is_a_miss(tmp_path: Path) -> None:
    bad = {**OLD_PARSED, "funcs": [["W.run", "b1", "0", []]]}
    _write(tmp_path / "map.parse-cache.json", {**OLD_CACHE, "entries": {"d1": OLD_PARSED, "d2": bad}})
    map_data, warning = store.load_map(_write(tmp_path / "map.json", OLD_MAP))
    assert warning is None and map_data is not None
    assert map_data.parsed.get("d1") == parse_parsed_file(OLD_PARSED)
    assert map_data.parsed.get("d2") is None  # read that file again
    store.save_map(tmp_path / "again.json", map_data)  # nothing new: no cache file written
    assert not (tmp_path / "again.parse-cache.json").exists()


def test_files_written_before_typed_records_load_unchanged(tmp_path: Path) -> None:
    state, warning = store.load_state(_write(tmp_path / "state.json", OLD_STATE))
    assert warning is None
    assert state.reaches["tests/test_w.py::test_a"] == (
        ActorModule("pkg/w.py"),
        SentModule("pkg/other.py"),
        RanFunction("pkg/w.py", "W.run", "abc"),
        RanFunction("pkg/w.py", "<module>", "-"),
    )
    assert "tests/test_w.py::test_b" not in state.reaches  # recorded without a reach: unknown
    store.save_state(tmp_path / "again.json", state)
    again = json.loads((tmp_path / "again.json").read_text())
    assert list(again["reach_lists"].values()) == [sorted(OLD_STATE["reach_lists"]["r1"])]  # type: ignore[index]
    assert (again["tests"], again["generations"], again["imports"]) == (
        OLD_STATE["tests"],
        OLD_STATE["generations"],
        OLD_STATE["imports"],
    )

    map_data, warning = store.load_map(_write(tmp_path / "map.json", OLD_MAP))
    assert warning is None and map_data is not None
    assert map_data.tests == {"tests/test_w.py": ("tests/test_w.py::test_a",)}
    assert map_data.to_json() == OLD_MAP  # written back byte for byte the same structure


@pytest.mark.parametrize(
    ("kind", "damage"),
    [
        ("state", {"reach_lists": {"r1": ["pkg/w.py::W.run"]}}),  # a stored function without digest
        ("state", {"reach_lists": {"r1": ["@"]}}),
        ("map", {"tests": {"tests/test_w.py": {"nodeids": "tests/test_w.py::test_a"}}}),
        ("map", {"stats": {"pkg/w.py": 1}}),
        ("map", {"deps": {"pkg/w.py": "pkg/x.py"}}),
    ],
)
def test_a_malformed_record_means_one_warning_and_a_rebuild(tmp_path: Path, kind: str, damage: dict[str, Any]) -> None:
    if kind == "state":
        state, warning = store.load_state(_write(tmp_path / "state.json", {**OLD_STATE, **damage}))
        assert state.tests == {} and state.reaches == {}
    else:
        map_data, warning = store.load_map(_write(tmp_path / "map.json", {**OLD_MAP, **damage}))
        assert map_data is None
    assert warning is not None and "\n" not in warning
    assert warning.startswith(f"{kind}.json has an unexpected structure (") and warning.endswith("; rebuilding it")
