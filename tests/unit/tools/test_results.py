"""results.py: keys, metric checks, the atomic writes, the dated copies, the README's jq line."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from testharness import results

START = datetime(2026, 3, 24, 23, 34, 12)


def _doc(**over: object) -> dict[str, object]:
    kw: dict[str, object] = dict(
        exit_status=0,
        git_commit="a" * 40,
        start=START,
        metrics={"test_m::test_t": {"v": 1.5, "_elapsed": 0.1}},
        gpu_types=["NVIDIA H200", "NVIDIA H200"],
        coverage=24.5,
        memory_source="none",
        tests={},
    )
    kw.update(over)
    return results.build_results(**kw)  # type: ignore[arg-type]


def test_metric_key_uses_module_stem_and_keeps_param_ids() -> None:
    assert results.metric_key("tests/unit/a/test_x.py::test_y") == "test_x::test_y"
    assert results.metric_key("tests/unit/test_x.py::test_y[p1-2]") == "test_x::test_y[p1-2]"
    assert results.metric_key("test_x.py::TestC::test_y[a]") == "test_x::TestC::test_y[a]"


@pytest.mark.parametrize("value", [object(), {1, 2}, float("nan"), b"bytes"])
def test_check_metric_rejects_non_json_naming_the_metric(value: object) -> None:
    with pytest.raises(results.MetricError, match="metric 'loss'"):
        results.check_metric("loss", value)


def test_check_metric_copies_and_reserves_underscore() -> None:
    original = {"a": [1, 2]}
    copy = results.check_metric("m", original)
    original["a"].append(3)
    assert copy == {"a": [1, 2]}
    with pytest.raises(results.MetricError, match="reserved"):
        results.check_metric("_elapsed", 1.0)


def test_build_results_has_every_documented_key() -> None:
    doc = _doc()
    assert list(doc) == [
        "exit_status", "git_commit", "start_time", "metrics", "gpu_types", "coverage",
        "memory_unit", "memory_source", "tests",
    ]  # fmt: skip
    assert doc["start_time"] == "2026-03-24 23:34:12"
    assert doc["gpu_types"] == ["NVIDIA H200"]
    assert doc["memory_unit"] == "MiB"


def test_atomic_write_keeps_the_old_file_when_replacing_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "unit_results.json"
    results.write_json_atomic(target, {"old": 1})

    def boom(src: object, dst: object) -> None:
        raise OSError("disk gone")

    monkeypatch.setattr(os, "replace", boom)
    with pytest.raises(OSError):
        results.write_json_atomic(target, {"new": 2})
    assert json.loads(target.read_text()) == {"old": 1}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["unit_results.json"]  # no temp left


def test_atomic_write_of_a_bad_value_leaves_nothing(tmp_path: Path) -> None:
    target = tmp_path / "r.json"
    results.write_json_atomic(target, {"ok": 1})
    with pytest.raises(ValueError):
        results.write_json_atomic(target, {"bad": float("nan")})
    assert json.loads(target.read_text()) == {"ok": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["r.json"]


def test_dated_copies_are_never_overwritten(tmp_path: Path) -> None:
    paths = [results.write_results(tmp_path, _doc(exit_status=i), START)[1] for i in range(3)]
    assert [p.name for p in paths] == [
        "20260324_233412.json", "20260324_233412_1.json", "20260324_233412_2.json",
    ]  # fmt: skip
    assert [json.loads(p.read_text())["exit_status"] for p in paths] == [0, 1, 2]
    assert json.loads((tmp_path / "unit_results.json").read_text())["exit_status"] == 2
    assert not [p for p in (tmp_path / "unit_results").iterdir() if p.name.startswith(".")]


def test_git_commit_outside_a_checkout_says_so(tmp_path: Path) -> None:
    assert results.git_commit(tmp_path).startswith("unknown")


def test_readme_jq_line_prints_one_row_per_dated_file(tmp_path: Path) -> None:
    jq = shutil.which("jq")
    assert jq, "jq is needed for the README's history line: apt-get install jq"
    # Two runs a minute apart (file names that sort the same in every locale); values that
    # jq 1.6 and 1.7 print alike (1.7 would print 1.0 as "1.0", 1.6 as "1").
    for i, commit in enumerate(["a" * 40, "b" * 40]):
        start = START + timedelta(minutes=i)
        metrics = {"test_hf_ray_policy::test_lm_policy_generation": {"avg_prob_mult_error": 1.25 + i}}
        results.write_results(tmp_path, _doc(git_commit=commit, metrics=metrics, start=start), start)
    line = (
        "jq -r '[.start_time, .git_commit, "
        '.metrics["test_hf_ray_policy::test_lm_policy_generation"].avg_prob_mult_error]'
        " | @tsv' unit_results/*"
    )
    out = subprocess.run(
        ["bash", "-c", line], cwd=tmp_path, capture_output=True, text=True, check=True
    ).stdout
    assert out.splitlines() == [
        f"2026-03-24 23:34:12\t{'a' * 40}\t1.25",
        f"2026-03-24 23:35:12\t{'b' * 40}\t2.25",
    ]
