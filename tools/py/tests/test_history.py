"""history.py: loading the dated results files robustly, and the durations they record."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from testharness.history import (
    HISTORY_ENV,
    RESULTS_DIR_ENV,
    configured_results_dir,
    load_history,
    recorded_durations,
    resolve_history_dir,
)
from testharness.project_root import find_project_root
from testharness.settings import SettingsError, load_settings

SHA_A = "a" * 40
SHA_B = "b" * 40


def write_run(directory: Path, name: str, start_time: str, tests: dict[str, Any], **extra: Any) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    data = {
        "exit_status": 0,
        "git_commit": SHA_A,
        "start_time": start_time,
        "metrics": {},
        "tests": tests,
        **extra,
    }
    path = directory / name
    path.write_text(json.dumps(data))
    return path


def t(duration: Any, outcome: str = "passed", attempts: Any = None) -> dict[str, Any]:
    return {"key": "k", "outcome": outcome, "duration": duration, "attempts": attempts or [outcome]}


def test_runs_are_ordered_by_start_time_not_file_name(tmp_path: Path) -> None:
    write_run(tmp_path, "b.json", "2026-01-02 00:00:00", {"x::a": t(2.0)})
    write_run(tmp_path, "a.json", "2026-01-03 00:00:00", {"x::a": t(3.0)})
    write_run(tmp_path, "c.json", "2026-01-01 00:00:00", {"x::a": t(1.0)})
    history = load_history(tmp_path)
    assert [r.path.name for r in history.runs] == ["c.json", "b.json", "a.json"]
    assert history.warnings == []
    assert load_history(tmp_path, last=2).runs[0].path.name == "b.json"


def test_malformed_files_are_skipped_with_one_warning_each(tmp_path: Path) -> None:
    good = write_run(tmp_path, "20260101_000000.json", "2026-01-01 00:00:00", {"x::a": t(1.0)})
    (tmp_path / "20260101_000001.json").write_text('{"tests": {"x::a": ')  # truncated write
    (tmp_path / "20260101_000002.json").write_text("[1, 2, 3]")
    (tmp_path / "20260101_000003.json").write_text('{"something": "else"}')
    (tmp_path / "20260101_000004.json").write_bytes(b"\xff\xfe\x00garbage")
    (tmp_path / "notes.txt").write_text("not json, not looked at")
    history = load_history(tmp_path)
    assert [r.path for r in history.runs] == [good]
    assert len(history.warnings) == 4
    assert all(w.startswith("skipped ") and "\n" not in w for w in history.warnings)
    assert any("not valid JSON" in w and "000001" in w for w in history.warnings)
    assert any("not a JSON object" in w for w in history.warnings)
    assert any("not a results file" in w for w in history.warnings)


def test_bad_entries_inside_a_run_do_not_cost_the_run(tmp_path: Path) -> None:
    write_run(
        tmp_path,
        "r.json",
        "not a time",
        {"x::ok": t(1.5), "x::str": t("slow"), "x::neg": t(-1), "x::bool": t(True), "x::bad": 7},
        git_commit=1234,
        exit_status="zero",
    )
    (run,) = load_history(tmp_path).runs
    assert run.started is None and run.exit_status is None and run.git_commit == "1234"
    assert set(run.tests) == {"x::ok", "x::str", "x::neg", "x::bool"}
    assert run.tests["x::ok"].duration == 1.5
    assert run.tests["x::str"].duration is None
    assert run.tests["x::neg"].duration is None
    assert run.tests["x::bool"].duration is None


def test_missing_directory_is_an_empty_history(tmp_path: Path) -> None:
    history = load_history(tmp_path / "nope")
    assert history.runs == [] and history.warnings == []


def test_recorded_durations_are_the_median_of_recent_runs(tmp_path: Path) -> None:
    for i, d in enumerate([100.0, 1.0, 2.0, 3.0, 50.0, 4.0]):
        write_run(
            tmp_path, f"{i}.json", f"2026-01-0{i + 1} 00:00:00", {"x::a": t(d), **({"x::b": t(7.0)} if i == 0 else {})}
        )
    durations = recorded_durations(load_history(tmp_path).runs, window=5)
    # The oldest 100 s is out of the window; the 50 s outlier does not dominate.
    assert durations == {"x::a": 3.0, "x::b": 7.0}


def test_history_dir_precedence(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text('[tool.testharness]\nresults_dir = "out/res"\n')
    assert resolve_history_dir(None, tmp_path, environ={}) == tmp_path / "out/res/unit_results"
    assert resolve_history_dir(None, tmp_path, environ={HISTORY_ENV: "/env/h"}) == Path("/env/h")
    assert resolve_history_dir("/cli/h", tmp_path, environ={HISTORY_ENV: "/env/h"}) == Path("/cli/h")
    # Results sent elsewhere: the runs recorded there are the history (an explicit history wins).
    sent = {RESULTS_DIR_ENV: "/env/res"}
    assert resolve_history_dir(None, tmp_path, environ=sent) == Path("/env/res/unit_results")
    assert resolve_history_dir(None, tmp_path, environ=sent, results_dir="/cli/res") == Path("/cli/res/unit_results")
    assert resolve_history_dir(None, tmp_path, environ={**sent, HISTORY_ENV: "/env/h"}) == Path("/env/h")


def test_history_dir_falls_back_to_settings_given_without_reading_them_again(tmp_path: Path) -> None:
    # A pytest run hands over the settings it read once; the file is not read (here: not valid).
    (tmp_path / "pyproject.toml").write_text('[tool.testharness]\nresults_dir = "out/res"\n')
    read_once = load_settings(tmp_path)
    (tmp_path / "pyproject.toml").write_text("this is [not toml")
    assert resolve_history_dir(None, tmp_path, environ={}, settings=read_once) == tmp_path / "out/res/unit_results"


@pytest.mark.parametrize(
    ("content", "default"),
    [
        (None, "tests"),
        ("[project]\nname = 'x'\n", "tests"),
        ("[tool.pytest.ini_options]\ntestpaths = ['suite/unit', 'suite/e2e']\n", "suite/unit"),
        ("[tool.testharness]\ntest_roots = ['checks']\n[tool.pytest.ini_options]\ntestpaths = ['t']\n", "checks"),
        ("[tool.testharness]\ntest_roots = []\n", "."),
    ],
    ids=["absent", "no-section", "testpaths", "test-roots", "no-roots"],
)
def test_results_dir_defaults_to_the_first_test_root(tmp_path: Path, content: str | None, default: str) -> None:
    # pytest's own testpaths, never a path of this repository's
    if content is not None:
        (tmp_path / "pyproject.toml").write_text(content)
    assert configured_results_dir(tmp_path) == tmp_path / default


@pytest.mark.parametrize(
    ("content", "needle"),
    [("[tool.testharness]\nresults_dir = 3\n", "results_dir"), ("this is [not toml", "pyproject.toml")],
    ids=["wrong-type", "broken"],
)
def test_a_bad_results_dir_is_the_settings_error_not_a_silent_default(
    tmp_path: Path, content: str, needle: str
) -> None:
    # The same one-line error as every other reader of [tool.testharness]: history used to
    # fall back to a default and read the wrong directory without a word.
    (tmp_path / "pyproject.toml").write_text(content)
    with pytest.raises(SettingsError, match=needle) as info:
        resolve_history_dir(None, tmp_path, environ={})
    assert "\n" not in str(info.value)


def test_project_root_is_found_from_a_subdirectory(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text("[tool.testharness]\n")
    sub = tmp_path / "pkg" / "deep"
    sub.mkdir(parents=True)
    (tmp_path / "pkg" / "pyproject.toml").write_text("[project]\nname = 'inner'\n")
    assert find_project_root(sub) == tmp_path.resolve()
