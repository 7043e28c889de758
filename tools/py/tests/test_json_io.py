"""atomic_io.write_json_atomic: the harness's one JSON writer (results, metric dumps, checks)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from testharness import atomic_io, run_summary, tb_dump_cli
from testharness.atomic_io import json_text, write_json_atomic
from testharness.checks import cli as checks_cli
from testharness.remote_select import store


def test_every_writer_is_the_same_function() -> None:
    # One writer: the run summary, tb-dump, the checks' --json and remote-select state.
    assert run_summary.write_json_atomic is atomic_io.write_json_atomic
    assert tb_dump_cli.write_json_atomic is atomic_io.write_json_atomic
    assert store.write_json_atomic is atomic_io.write_json_atomic  # remote-select state (compact)
    assert checks_cli.write_json_atomic is atomic_io.write_json_atomic


def test_the_old_file_stays_when_replacing_fails(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "unit_results.json"
    write_json_atomic(target, {"old": 1})

    def boom(src: object, dst: object) -> None:
        raise OSError("disk gone")

    monkeypatch.setattr(os, "replace", boom)
    with pytest.raises(OSError):
        write_json_atomic(target, {"new": 2})
    assert json.loads(target.read_text()) == {"old": 1}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["unit_results.json"]  # no temp left


def test_nan_is_refused_by_default_and_nothing_is_written(tmp_path: Path) -> None:
    target = tmp_path / "r.json"
    write_json_atomic(target, {"ok": 1})
    with pytest.raises(ValueError):
        write_json_atomic(target, {"bad": float("nan")})
    assert json.loads(target.read_text()) == {"ok": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["r.json"]


def test_metric_dumps_keep_nan_visible(tmp_path: Path) -> None:
    target = tmp_path / "metrics.json"
    write_json_atomic(target, {"loss": {"1": float("nan")}}, allow_nan=True)
    assert json.loads(target.read_text())["loss"]["1"] != json.loads(target.read_text())["loss"]["1"]


def test_text_forms() -> None:
    assert json_text({"b": 1, "a": [1]}) == '{\n  "b": 1,\n  "a": [\n    1\n  ]\n}\n'
    assert json_text({"b": 1, "a": [1]}, compact=True) == '{"a":[1],"b":1}\n'
    assert json_text({"x": object}, default=lambda v: "<obj>") == '{\n  "x": "<obj>"\n}\n'
