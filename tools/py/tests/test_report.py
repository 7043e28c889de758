"""The report command: metric trends and flags, flaky tests, HTML and PNG output."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from testharness import __main__ as cli
from testharness.history import load_history
from testharness.report import (
    ReportError,
    RuleBook,
    apply_cli_rules,
    compute_trends,
    find_flaky,
    render_html,
    rulebook_from_config,
)

SHA_1 = "1" * 40
SHA_2 = "2" * 40


def write_run(
    directory: Path,
    index: int,
    metrics: dict[str, dict[str, Any]],
    commit: str = SHA_1,
    outcomes: dict[str, Any] | None = None,
) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    tests = {}
    for nodeid, outcome in (outcomes or {}).items():
        attempts = outcome if isinstance(outcome, list) else [outcome]
        tests[nodeid] = {"key": nodeid, "outcome": attempts[-1], "duration": 0.1, "attempts": attempts}
    data = {
        "exit_status": 0,
        "git_commit": commit,
        "start_time": f"2026-03-0{index + 1} 10:00:00",
        "metrics": metrics,
        "gpu_types": [],
        "coverage": 40.0,
        "tests": tests,
    }
    path = directory / f"2026030{index + 1}_100000.json"
    path.write_text(json.dumps(data))
    return path


def series_history(directory: Path, metric: str, values: list[Any], key: str = "test_mod::test_x") -> None:
    for i, value in enumerate(values):
        write_run(directory, i, {key: {metric: value}})


def trend_for(directory: Path, metric: str, book: RuleBook | None = None) -> Any:
    (trend,) = compute_trends(load_history(directory).runs, book or RuleBook(), metrics=[metric])
    return trend


# ----------------------------------------------------------------------------- flags


def test_elapsed_going_up_is_flagged_and_going_down_is_not(tmp_path: Path) -> None:
    series_history(tmp_path / "up", "_elapsed", [10.0, 10.5, 15.0])
    trend = trend_for(tmp_path / "up", "_elapsed")
    assert trend.rule.direction == "lower"
    assert trend.flags == ("regressed +42.9% vs previous", "regressed +50.0% vs best")

    series_history(tmp_path / "down", "_elapsed", [10.0, 10.5, 5.0])
    assert not trend_for(tmp_path / "down", "_elapsed").flagged


def test_tiny_elapsed_changes_are_noise(tmp_path: Path) -> None:
    series_history(tmp_path, "_elapsed", [0.05, 0.30])  # +500% but only 0.25 s
    assert not trend_for(tmp_path, "_elapsed").flagged


def test_memory_metrics_are_lower_is_better(tmp_path: Path) -> None:
    series_history(tmp_path, "peak_mem_mib", [1000, 1000, 1150])
    trend = trend_for(tmp_path, "peak_mem_mib")
    assert trend.rule.direction == "lower" and trend.rule.threshold_pct == 20.0
    assert not trend.flagged  # +15% is within the 20% band
    series_history(tmp_path / "b", "memory_after_step", [1000, 1000, 1300])
    assert trend_for(tmp_path / "b", "memory_after_step").flagged


def test_gradual_drift_is_caught_against_the_best(tmp_path: Path) -> None:
    series_history(tmp_path, "_elapsed", [10.0, 11.5, 13.0, 14.5])  # each step < 20%
    trend = trend_for(tmp_path, "_elapsed")
    assert trend.flags == ("regressed +45.0% vs best",)


def test_other_metrics_are_flagged_when_they_move_either_way(tmp_path: Path) -> None:
    series_history(tmp_path / "a", "avg_prob_mult_error", [1.0, 1.0, 1.2])
    series_history(tmp_path / "b", "avg_prob_mult_error", [1.0, 1.0, 0.8])
    series_history(tmp_path / "c", "avg_prob_mult_error", [1.0, 1.0, 1.05])
    assert trend_for(tmp_path / "a", "avg_prob_mult_error").flags == ("changed +20.0% vs previous",)
    assert trend_for(tmp_path / "b", "avg_prob_mult_error").flags == ("changed -20.0% vs previous",)
    assert not trend_for(tmp_path / "c", "avg_prob_mult_error").flagged
    assert trend_for(tmp_path / "c", "avg_prob_mult_error").best is None


def test_direction_and_threshold_come_from_config_then_cli(tmp_path: Path) -> None:
    series_history(tmp_path, "accuracy", [0.90, 0.91, 0.80])
    book = rulebook_from_config({"directions": {"acc*": "higher"}, "threshold_pct": {"higher": 5}})
    trend = trend_for(tmp_path, "accuracy", book)
    assert trend.rule.direction == "higher"
    assert trend.flags == ("regressed -12.1% vs previous", "regressed -12.1% vs best")
    book = apply_cli_rules(book, ["accuracy=lower"], ["lower=50"])
    assert not trend_for(tmp_path, "accuracy", book).flagged  # now going down is good


@pytest.mark.parametrize(
    "config,message",
    [
        ({"directions": {"x": "up"}}, "direction must be one of lower, higher, either"),
        ({"directions": ["x"]}, "directions must be a table"),
        ({"threshold_pct": {"lower": "lots"}}, "threshold must be a percentage"),
        ({"threshold_pct": {"sideways": 5}}, "direction must be one of"),
    ],
)
def test_bad_rule_config_is_a_one_line_error(config: dict[str, Any], message: str) -> None:
    with pytest.raises(ReportError, match=message):
        rulebook_from_config(config)


def test_non_numeric_metrics_are_not_trended(tmp_path: Path) -> None:
    write_run(tmp_path, 0, {"m::t": {"losses": [1, 2], "name": "x", "ok": True, "nan": float("nan"), "v": 1}})
    trends = compute_trends(load_history(tmp_path).runs, RuleBook())
    assert [t.metric for t in trends] == ["v"]


# ----------------------------------------------------------------------------- flaky


def test_outcome_changing_at_one_commit_is_flaky(tmp_path: Path) -> None:
    write_run(tmp_path, 0, {}, SHA_1, {"t.py::a": "passed", "t.py::b": "passed", "t.py::c": "skipped"})
    write_run(tmp_path, 1, {}, SHA_1, {"t.py::a": "failed", "t.py::b": "passed", "t.py::c": "passed"})
    write_run(tmp_path, 2, {}, SHA_2, {"t.py::a": "passed", "t.py::b": "failed"})  # new commit: a real change
    flaky = find_flaky(load_history(tmp_path).runs)
    assert [(f.nodeid, f.commit) for f in flaky] == [("t.py::a", SHA_1)]
    assert flaky[0].describe() == "failed 1, passed 1"


def test_pass_after_retry_is_flaky_even_in_one_run(tmp_path: Path) -> None:
    write_run(tmp_path, 0, {}, SHA_1, {"t.py::a": ["failed", "failed", "passed"], "t.py::b": ["failed", "failed"]})
    (flaky,) = find_flaky(load_history(tmp_path).runs)
    assert flaky.nodeid == "t.py::a" and flaky.passed_on_retry == 1
    assert "passed after a retry in 1 run(s)" in flaky.describe()


def test_runs_without_a_commit_are_not_compared(tmp_path: Path) -> None:
    write_run(tmp_path, 0, {}, "unknown (not a git checkout)", {"t.py::a": "passed"})
    write_run(tmp_path, 1, {}, "unknown (not a git checkout)", {"t.py::a": "failed"})
    assert find_flaky(load_history(tmp_path).runs) == []


# ----------------------------------------------------------------------------- command


def make_project(tmp_path: Path) -> Path:
    """A project with three runs of two tracked tests, as the tracker writes them."""
    history = tmp_path / "tests/unit/unit_results"
    for i, (elapsed, mem) in enumerate([(2.0, 500), (2.1, 505), (2.05, 498)]):
        write_run(
            history,
            i,
            {
                "test_policy::test_generation": {"_elapsed": elapsed, "avg_prob_mult_error": 1.0, "gen_mem": mem},
                "test_loss::test_nll": {"_elapsed": 0.2, "loss": 2.5},
            },
            outcomes={"tests/unit/test_policy.py::test_generation": "passed"},
        )
    # results_dir by default: the first of pytest's testpaths
    (tmp_path / "pyproject.toml").write_text(
        '[tool.testharness]\n[tool.pytest.ini_options]\ntestpaths = ["tests/unit"]\n'
    )
    return history


def run_cli(tmp_path: Path, *args: str, monkeypatch: pytest.MonkeyPatch) -> int:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("COLUMNS", "200")  # keep rich from folding the table cells we grep
    return cli.main(["report", *args])


def test_report_flags_a_regression_planted_in_a_copied_results_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    history = make_project(tmp_path)
    assert run_cli(tmp_path, "--check", monkeypatch=monkeypatch) == 0
    assert "0 flagged of 5" in capsys.readouterr().out

    latest = json.loads((history / "20260303_100000.json").read_text())
    latest["start_time"] = "2026-03-04 10:00:00"
    latest["metrics"]["test_policy::test_generation"]["_elapsed"] = 3.5  # planted: +70%
    (history / "20260304_100000.json").write_text(json.dumps(latest))
    assert run_cli(tmp_path, "--check", monkeypatch=monkeypatch) == 1
    out = capsys.readouterr().out
    assert "1 flagged of 5" in out
    row = next(line for line in out.splitlines() if "_elapsed" in line and "regressed" in line)
    assert "test_policy::test_generation" in row and "+70.7%" in row


def test_report_html_and_png(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    make_project(tmp_path)
    code = run_cli(
        tmp_path, "--metric", "_elapsed", "--html", "out/report.html", "--png", "charts", monkeypatch=monkeypatch
    )
    assert code == 0
    page = (tmp_path / "out/report.html").read_text()
    assert page.count('<figure class="chart') == 2  # one per selected metric series
    assert sorted(p.name for p in (tmp_path / "charts").iterdir()) == [
        "test_loss_test_nll___elapsed.png",
        "test_policy_test_generation___elapsed.png",
    ]
    assert all(
        (tmp_path / "charts" / n).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        for n in ("test_loss_test_nll___elapsed.png",)
    )
    assert "wrote out/report.html (2 chart(s))" in capsys.readouterr().out


def test_html_is_self_contained_and_escaped(tmp_path: Path) -> None:
    history_dir = tmp_path / "h"
    write_run(history_dir, 0, {"test_x::test_<script>": {"_elapsed": 1.0}})
    write_run(history_dir, 1, {"test_x::test_<script>": {"_elapsed": 1.1}})
    history = load_history(history_dir)
    page = render_html(history, compute_trends(history.runs, RuleBook()), [], "t")
    # No resource is fetched: the only URL is the SVG namespace, which is a name, not a fetch.
    urls = set(re.findall(r"https?://[^\s\"'<>]+", page))
    assert urls == {"http://www.w3.org/2000/svg"}
    assert not re.search(r"<(link|img|iframe)\b|\bsrc=", page)
    assert "test_<script>" not in page and "test_&lt;script&gt;" in page


@pytest.mark.parametrize(
    "args,message",
    [
        ([], "no results history in"),
        (["--history-dir", "h", "--metric", "nope"], "no numeric metric matches"),
        (["--history-dir", "h", "--direction", "loss"], "--direction expects GLOB=lower|higher|either"),
        (["--history-dir", "h", "--threshold", "ten"], "threshold must be a percentage"),
        (["--history-dir", "h", "--last", "-1"], "--last must be 0"),
    ],
)
def test_bad_input_is_a_one_line_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    series_history(tmp_path / "h", "_elapsed", [1.0])
    assert run_cli(tmp_path, *args, monkeypatch=monkeypatch) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("testharness report: error: ") and message in err[-1]


def test_report_skips_a_malformed_file_and_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    history = make_project(tmp_path)
    (history / "20260309_000000.json").write_text("{")
    assert run_cli(tmp_path, monkeypatch=monkeypatch) == 0
    out = capsys.readouterr().out
    assert "warning: skipped" in out and "20260309_000000.json" in out and "3 run(s)" in out


def _harness_installed() -> bool:
    from importlib.metadata import PackageNotFoundError, distribution

    try:
        distribution("testharness")
        return True
    except PackageNotFoundError:
        return False


def _console_script() -> str:
    """Where the environment puts the harness's console script: beside the interpreter (a
    virtual environment), else on PATH (e.g. `pip install --target DIR`, DIR/bin on PATH)."""
    beside = Path(sys.executable).with_name("testharness")
    return str(beside) if beside.exists() else (shutil.which("testharness") or str(beside))


@pytest.mark.parametrize(
    "argv",
    [
        [sys.executable, "-m", "testharness", "report"],
        [sys.executable, "-m", "testharness.report"],
        [_console_script(), "report"],
    ],
    ids=["python-m", "python-m-report", "console-script"],
)
def test_every_spelling_of_the_command_works(tmp_path: Path, argv: list[str]) -> None:
    if not Path(argv[0]).exists():
        if not _harness_installed():
            pytest.skip("testharness is only on PYTHONPATH here (no uv sync), so it has no console script")
        pytest.fail(f"no console script {argv[0]}: is tools/py installed in this environment (uv sync)?")
    make_project(tmp_path)
    result = subprocess.run(
        [*argv, "--flagged-only"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={"COLUMNS": "160", "PATH": "", **{k: v for k, v in os.environ.items() if k == "PYTHONPATH"}},
    )
    assert result.returncode == 0, result.stderr
    assert "Metric trends (0 flagged of 5)" in result.stdout


def test_parametrized_keys_survive_the_terminal_table(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # "[tp1]" looks like rich markup; it must be printed, not swallowed.
    series_history(tmp_path / "h", "_elapsed", [1.0, 1.0], key="test_worker::test_step[tp1]")
    assert run_cli(tmp_path, "--history-dir", "h", monkeypatch=monkeypatch) == 0
    assert "test_worker::test_step[tp1]" in capsys.readouterr().out
