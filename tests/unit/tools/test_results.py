"""results.py: keys, metric checks, the dated copies, reading files back, the README's jq line.

The atomic JSON writer itself is tested in test_json_io.py."""

from __future__ import annotations

import dataclasses
import json
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
    out = subprocess.run(["bash", "-c", line], cwd=tmp_path, capture_output=True, text=True, check=True).stdout
    assert out.splitlines() == [
        f"2026-03-24 23:34:12\t{'a' * 40}\t1.25",
        f"2026-03-24 23:35:12\t{'b' * 40}\t2.25",
    ]


def test_a_written_results_file_reads_back_as_the_same_run(tmp_path: Path) -> None:
    outcome = results.OutcomeRecord(
        key="test_m::test_t", outcome="passed", duration=0.25, attempts=["failed", "passed"]
    )
    latest, dated = results.write_results(tmp_path, _doc(tests={"tests/test_m.py::test_t": outcome}), START)
    run = results.read_results_file(dated)
    assert run.started == START and run.git_commit == "a" * 40 and run.short_commit == "a" * 7
    assert run.metrics == {"test_m::test_t": {"v": 1.5, "_elapsed": 0.1}}
    assert run.tests["tests/test_m.py::test_t"] == results.TestRecord(
        "tests/test_m.py::test_t", "test_m::test_t", "passed", 0.25, ("failed", "passed")
    )
    assert (run.gpu_types, run.coverage, run.exit_status) == (("NVIDIA H200",), 24.5, 0)
    assert results.read_results_file(latest) == dataclasses.replace(run, path=latest)


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        (b'{"tests": {', "not valid JSON"),
        (b"[1]", "top level is not a JSON object"),
        (b'{"other": 1}', "not a results file"),
        (b"\xff\xfe", "cannot read it"),
    ],
)
def test_an_unusable_file_is_one_line_naming_why(tmp_path: Path, content: bytes, reason: str) -> None:
    path = tmp_path / "r.json"
    path.write_bytes(content)
    with pytest.raises(results.ResultsFileError, match=reason) as info:
        results.read_results_file(path)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize(
    ("value", "expected"),
    [(1, 1.0), (2.5, 2.5), (True, None), ("3", None), (float("nan"), None), (float("inf"), None), ([1], None)],
)
def test_finite_number_takes_only_real_numbers(value: object, expected: float | None) -> None:
    assert results.finite_number(value) == expected
