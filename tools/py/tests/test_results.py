"""results.py: keys, metric checks, the dated copies, reading files back, the README's jq line.

The atomic JSON writer itself is tested in test_json_io.py."""

from __future__ import annotations

import dataclasses
import json
import re
import shutil
import subprocess
from datetime import datetime
from pathlib import Path

import pytest

from testharness import metrics, record_files, results

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
    assert metrics.metric_key("tests/unit/a/test_x.py::test_y") == "test_x::test_y"
    assert metrics.metric_key("tests/unit/test_x.py::test_y[p1-2]") == "test_x::test_y[p1-2]"
    assert metrics.metric_key("test_x.py::TestC::test_y[a]") == "test_x::TestC::test_y[a]"


@pytest.mark.parametrize("value", [object(), {1, 2}, float("nan"), b"bytes"])
def test_check_metric_rejects_non_json_naming_the_metric(value: object) -> None:
    with pytest.raises(metrics.MetricError, match="metric 'loss'"):
        metrics.check_metric("loss", value)


def test_check_metric_copies_and_reserves_underscore() -> None:
    original = {"a": [1, 2]}
    copy = metrics.check_metric("m", original)
    original["a"].append(3)
    assert copy == {"a": [1, 2]}
    with pytest.raises(metrics.MetricError, match="reserved"):
        metrics.check_metric("_elapsed", 1.0)


@pytest.mark.parametrize(
    ("value", "where", "key"),
    [({1: "a", "1": "b"}, "m", "1 (int)"), ({"x": [{2.5: 1}]}, "m['x'][0]", "2.5 (float)"),
     ({"x": {None: 1}}, "m['x']", "None (NoneType)"), ({(1, 2): 1}, "m", "(1, 2) (tuple)")],
)  # fmt: skip
def test_check_metric_refuses_keys_that_are_not_strings(value: object, where: str, key: str) -> None:
    # JSON would write 1 as "1": 1 and "1" would silently become one key (the last one won).
    with pytest.raises(metrics.MetricError) as err:
        metrics.check_metric("m", value)
    assert str(err.value).startswith(f"metric 'm': key {key} in {where} is not a string: JSON keys are strings")
    assert "track str keys" in str(err.value)
    if key == "1 (int)":
        assert "so it would be written as '1', merging with any key '1'" in str(err.value)


def test_check_metric_refuses_deep_and_self_containing_values_with_its_own_error() -> None:
    ok: list[object] = []  # one level
    for _ in range(metrics.MAX_METRIC_DEPTH - 2):
        ok = [ok]
    assert metrics.check_metric("m", {"deep": ok}) == {"deep": ok}  # MAX_METRIC_DEPTH levels with the dict
    deep: object = []
    for _ in range(5000):  # json.dumps would raise RecursionError
        deep = [deep]
    with pytest.raises(metrics.MetricError, match=r"^metric 'deep': the value nests lists/dicts more than 100 levels"):
        metrics.check_metric("deep", deep)
    with pytest.raises(metrics.MetricError, match=r"^metric 'm': the value nests"):
        metrics.check_metric("m", {"deep": [ok]})
    loop: list[object] = [1]
    loop.append({"again": loop})
    with pytest.raises(metrics.MetricError, match=r"^metric 'loop': the value contains itself at loop\[1\]\['again'\]"):
        metrics.check_metric("loop", loop)
    shared = [1]
    assert metrics.check_metric("m", {"a": shared, "b": shared}) == {"a": [1], "b": [1]}  # shared, not a loop


def test_write_results_writes_both_files_or_neither(tmp_path: Path) -> None:
    (tmp_path / "unit_results").write_text("")  # where the dated copies go: a file
    with pytest.raises(results.ResultsWriteError) as err:
        record_files.write_results(tmp_path, _doc(), START)
    assert str(err.value) == (
        f"{tmp_path / 'unit_results' / '20260324_233412.json'}: {tmp_path / 'unit_results'} is a file, not a directory"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["unit_results"]  # the latest was removed again
    with pytest.raises(results.ResultsWriteError, match="is a file, not a directory"):
        record_files.write_results(tmp_path / "unit_results" / "out", _doc(), START)


def test_rewrite_that_fails_removes_the_files(tmp_path: Path) -> None:
    latest, dated = record_files.write_results(tmp_path, _doc(), START)
    dated.parent.rename(tmp_path / "moved")
    dated.parent.write_text("")  # the dated copy can no longer be replaced
    with pytest.raises(results.ResultsWriteError):
        record_files.rewrite_results([latest, dated], _doc(exit_status=1))
    assert not latest.exists()  # it would say exit_status 0 for a run that exits otherwise


def test_remove_previous_says_why_a_record_stays(tmp_path: Path) -> None:
    record_files.write_results(tmp_path, _doc(), START)
    assert record_files.remove_previous(tmp_path) is None
    assert not (tmp_path / "unit_results.json").exists() and len(list((tmp_path / "unit_results").iterdir())) == 1
    assert record_files.remove_previous(tmp_path) is None  # nothing there
    (tmp_path / "afile").write_text("")
    assert record_files.remove_previous(tmp_path / "afile") is None  # nothing can be there
    (tmp_path / "unit_results.json").mkdir()
    assert record_files.remove_previous(tmp_path) == f"{tmp_path / 'unit_results.json'}: Is a directory"


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
    paths = [record_files.write_results(tmp_path, _doc(exit_status=i), START)[1] for i in range(3)]
    assert [p.name for p in paths] == [
        "20260324_233412.json", "20260324_233412_1.json", "20260324_233412_2.json",
    ]  # fmt: skip
    assert [json.loads(p.read_text())["exit_status"] for p in paths] == [0, 1, 2]
    assert json.loads((tmp_path / "unit_results.json").read_text())["exit_status"] == 2
    assert not [p for p in (tmp_path / "unit_results").iterdir() if p.name.startswith(".")]


def test_git_commit_outside_a_checkout_says_so(tmp_path: Path) -> None:
    assert results.git_commit(tmp_path).startswith("unknown")


REPO = Path(__file__).resolve().parents[3]


def _readme_jq_line() -> str:
    (line,) = [ln for ln in (REPO / "README.md").read_text().splitlines() if ln.startswith("jq -r ")]
    return line


def _documented_example() -> tuple[str, str, str]:
    """(module, test, metric) of the example docs/unit-tests.md gives for the jq line."""
    found = re.search(r'for example `\.metrics\["(\w+)::(\w+)"\]\.(\w+)`', (REPO / "docs/unit-tests.md").read_text())
    assert found, "docs/unit-tests.md gives no example key for the jq line"
    module, test, metric = found.groups()
    return module, test, metric


def test_the_documented_example_key_is_a_metric_of_this_repository() -> None:
    module, test, metric = _documented_example()
    (source,) = (REPO / "tests" / "unit").rglob(f"{module}.py")
    text = source.read_text()
    assert f"def {test}(" in text and f'tracker.track("{metric}"' in text


def test_readme_jq_line_prints_the_metric_from_real_results_files(pytester: pytest.Pytester) -> None:
    """The README's line, with the documented example key, on files the tracker wrote."""
    jq = shutil.which("jq")
    assert jq, "jq is needed for the README's history line: apt-get install jq"
    module, test, metric = _documented_example()
    # The example test's shape (the real one trains a model): it tracks the same metric.
    pytester.makepyfile(**{module: f"def {test}(tracker):\n    tracker.track({metric!r}, 0.25)\n"})
    for _ in range(2):
        pytester.runpytest_inprocess("-p", "testharness.tracker", "--unit-results-dir=tests/unit").assert_outcomes(
            passed=1
        )
    line = _readme_jq_line().replace("MODULE::TEST", f"{module}::{test}").replace("METRIC", metric)
    out = subprocess.run(["bash", "-c", line], cwd=pytester.path, capture_output=True, text=True, check=True).stdout
    rows = [row.split("\t") for row in out.splitlines()]
    assert len(rows) == 2
    for start_time, commit, value in rows:
        assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d", start_time) and commit
        assert value == "0.25"  # the metric column is not empty


def test_a_written_results_file_reads_back_as_the_same_run(tmp_path: Path) -> None:
    outcome = results.OutcomeRecord(
        key="test_m::test_t", outcome="passed", duration=0.25, attempts=["failed", "passed"]
    )
    latest, dated = record_files.write_results(tmp_path, _doc(tests={"tests/test_m.py::test_t": outcome}), START)
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
