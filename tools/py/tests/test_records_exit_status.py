"""The results record tells the truth about how a run ended: the exit status pytest really
exits with (real pytest-testmon, sharding and xdist in the loop), runs that execute no test,
and metric keys of test files that share a name. Every run is a real pytest subprocess; under
-n its workers join the module's Ray cluster (xdist_project.shared_head) rather than start one per
run: what these tests look at is the record, not the start of a cluster (test_parallel.py's).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from records_project import joining_under_xdist, read_results, run_env, write_project

from testharness.history import load_history

# --- the recorded exit status is the one pytest exits with -----------------------------------


def _pytest(root: Path, *args: str, ray: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:randomly", *args], cwd=root, env={**run_env(root), **(ray or {})},
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip


QUICK_TESTS = {
    "tests/test_one.py": "def test_one(tracker):\n    tracker.track('v', 1)\n",
    "tests/test_two.py": "def test_two(tracker):\n    tracker.track('v', 2)\n",
}


@pytest.mark.parametrize("xdist", [[], ["-n", "2"]], ids=["serial", "xdist"])
def test_testmon_with_nothing_to_run_is_recorded_as_exit_0(
    tmp_path: Path, xdist: list[str], request: pytest.FixtureRequest
) -> None:
    root = write_project(tmp_path, QUICK_TESTS)
    first = _pytest(root, "--testmon", *xdist, ray=joining_under_xdist(request, xdist))
    assert first.returncode == 0, first.stdout + first.stderr
    assert read_results(root)["exit_status"] == 0
    again = _pytest(
        root, "--testmon", *xdist, ray=joining_under_xdist(request, xdist)
    )  # nothing changed: testmon deselects everything
    assert again.returncode == 0, again.stdout + again.stderr
    doc = read_results(root)
    assert doc["exit_status"] == 0 and doc["tests"] == {}


def test_an_empty_shard_is_recorded_as_exit_0(tmp_path: Path) -> None:
    root = write_project(tmp_path, QUICK_TESTS)
    proc = _pytest(root, "--shard", "3/3")  # two tests, three shards: the third is empty
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert read_results(root)["exit_status"] == 0


def test_xdist_controller_writes_one_record_with_the_workers_metrics(
    tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    root = write_project(tmp_path, {**QUICK_TESTS, "tests/test_bad.py": "def test_bad():\n    assert False\n"})
    proc = _pytest(root, "-n", "2", ray=joining_under_xdist(request, ["-n", "2"]))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    doc = read_results(root)
    assert doc["exit_status"] == 1
    assert {k: v["outcome"] for k, v in doc["tests"].items()} == {
        "tests/test_one.py::test_one": "passed", "tests/test_two.py::test_two": "passed",
        "tests/test_bad.py::test_bad": "failed",
    }  # fmt: skip
    assert doc["metrics"]["test_one::test_one"]["v"] == 1 and doc["metrics"]["test_two::test_two"]["v"] == 2
    assert len(list((root / "out" / "unit_results").glob("*.json"))) == 1


# --- runs that execute no test leave no record ----------------------------------------------


@pytest.mark.parametrize(
    "args",
    [["--collect-only"], ["--shard", "1/2", "--shard-plan"], ["--help"]],
    ids=["collect-only", "shard-plan", "help"],
)
def test_runs_that_execute_no_test_write_no_results(tmp_path: Path, args: list[str]) -> None:
    root = write_project(tmp_path, QUICK_TESTS)
    proc = _pytest(root, *args)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert not (root / "out").exists()


def test_history_ignores_records_of_runs_without_tests(tmp_path: Path) -> None:
    dated = tmp_path / "unit_results"
    dated.mkdir()
    base = {"exit_status": 0, "git_commit": "x", "start_time": "2026-01-01 00:00:00", "metrics": {}}
    (dated / "empty.json").write_text(json.dumps({**base, "tests": {}}))
    (dated / "real.json").write_text(json.dumps({**base, "tests": {"t.py::t": {"outcome": "passed", "duration": 1.0}}}))
    history = load_history(dated)
    assert [r.path.name for r in history.runs] == ["real.json"]
    assert history.warnings == []


# --- metric keys ------------------------------------------------------------------------------


@pytest.mark.parametrize("xdist", [[], ["-n", "2"]], ids=["serial", "xdist"])
def test_test_files_sharing_a_name_get_distinct_stable_keys(
    tmp_path: Path, xdist: list[str], request: pytest.FixtureRequest
) -> None:
    # Not a git checkout: the first by path keeps the short keys (test_tracker.py: with git).
    root = write_project(tmp_path, {
        "tests/a/test_x.py": "def test(tracker):\n    tracker.track('v', 'a')\n",
        "tests/b/test_x.py": "def test(tracker):\n    tracker.track('v', 'b')\n",
        "tests/test_y.py": "def test(tracker):\n    tracker.track('v', 'y')\n",
    })  # fmt: skip
    for d in ("tests/a", "tests/b"):
        (root / d / "__init__.py").write_text("")  # two modules named test_x need packages
    proc = _pytest(
        root, *xdist, ray=joining_under_xdist(request, xdist)
    )  # under -n the controller keys what the workers send alike
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "share the name test_x.py" in proc.stdout
    doc = read_results(root)
    assert {k: v["v"] for k, v in doc["metrics"].items()} == {
        "test_x::test": "a",
        "tests/b/test_x::test": "b",
        "test_y::test": "y",
    }
    assert doc["tests"]["tests/b/test_x.py::test"]["key"] == "tests/b/test_x::test"
    only_b = _pytest(
        root, "tests/b/test_x.py", *xdist, ray=joining_under_xdist(request, xdist)
    )  # the key does not depend on what a run selects
    assert only_b.returncode == 0
    assert list(read_results(root)["metrics"]) == ["tests/b/test_x::test"]
