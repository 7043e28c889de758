"""The tracker fixture and unit_results.json, through inner pytest runs (pytester)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

HARNESS_PLUGINS = ("-p", "testharness.selection", "-p", "testharness.tracker")

TRACKED = """
import pytest

def test_exponentiate(tracker):
    start = tracker.get_max_mem()
    tracker.track("result", 2 ** 4)
    tracker.log_max_mem("mem_after")
    tracker.track("change_in_mem", tracker.get_max_mem() - start)

@pytest.mark.parametrize("n", [1, 2], ids=["one", "two"])
def test_param(tracker, n):
    tracker.track("n", n)

def test_untracked():
    pass
"""


def _run(pytester: pytest.Pytester, *args: str) -> tuple[pytest.RunResult, dict[str, Any]]:
    out = pytester.path / "results"
    result = pytester.runpytest_inprocess(*HARNESS_PLUGINS, f"--unit-results-dir={out}", *args, no_reraise_ctrlc=True)
    return result, json.loads((out / "unit_results.json").read_text())


def test_keys_elapsed_and_param_ids(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_mod=TRACKED)
    result, doc = _run(pytester)
    result.assert_outcomes(passed=4)
    m = doc["metrics"]
    assert set(m) == {"test_mod::test_exponentiate", "test_mod::test_param[one]",
                      "test_mod::test_param[two]"}  # fmt: skip
    assert m["test_mod::test_param[one]"]["n"] == 1
    assert m["test_mod::test_param[two]"]["n"] == 2
    assert all(isinstance(v["_elapsed"], float) and v["_elapsed"] >= 0 for v in m.values())
    exp = m["test_mod::test_exponentiate"]
    assert exp["result"] == 16 and exp["mem_after"] > 0
    assert doc["memory_unit"] == "MiB" and doc["memory_source"] in ("gpu", "rss")
    assert doc["exit_status"] == 0
    assert doc["coverage"].startswith("not measured: run with --cov=")
    # every test has an outcome, tracker or not
    assert doc["tests"]["test_mod.py::test_untracked"] == {
        "key": "test_mod::test_untracked", "outcome": "passed",
        "duration": doc["tests"]["test_mod.py::test_untracked"]["duration"], "attempts": ["passed"],
    }  # fmt: skip
    dated = list((pytester.path / "results" / "unit_results").glob("*.json"))
    assert len(dated) == 1 and json.loads(dated[0].read_text()) == doc


def test_track_rejects_a_non_json_value_naming_the_metric(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_bad="def test_bad(tracker):\n    tracker.track('weights', object())\n")
    result, doc = _run(pytester)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*MetricError: metric 'weights'*not JSON-serialisable*"])
    assert doc["exit_status"] == 1


def test_failing_test_writes_exit_status_1(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_f="def test_ok(tracker):\n    tracker.track('a', 1)\n"
        "def test_fails(tracker):\n    tracker.track('b', 2)\n    assert False\n"
        "import pytest\n@pytest.mark.skip(reason='x')\ndef test_skip(): pass\n"
        "@pytest.mark.xfail\ndef test_xf(): assert False\n"
    )
    result, doc = _run(pytester)
    assert result.ret == 1
    assert doc["exit_status"] == 1
    assert doc["metrics"]["test_f::test_fails"]["b"] == 2  # metrics survive the failure
    outcomes = {k.split("::")[1]: v["outcome"] for k, v in doc["tests"].items()}
    assert outcomes == {"test_ok": "passed", "test_fails": "failed", "test_skip": "skipped",
                        "test_xf": "xfailed"}  # fmt: skip


def test_keyboard_interrupt_still_writes(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_k="def test_a(tracker):\n    tracker.track('a', 1)\n"
        "def test_ctrl_c():\n    raise KeyboardInterrupt\n"
        "def test_never(): pass\n"
    )
    result, doc = _run(pytester)
    assert result.ret == pytest.ExitCode.INTERRUPTED
    assert doc["exit_status"] == 2
    assert doc["metrics"]["test_k::test_a"]["a"] == 1
    assert doc["tests"]["test_k.py::test_a"]["outcome"] == "passed"
    assert "test_k.py::test_never" not in doc["tests"]


def test_no_test_selected_still_writes(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_mod=TRACKED)
    result, doc = _run(pytester, "-k", "no_such_test")
    assert result.ret == pytest.ExitCode.NO_TESTS_COLLECTED
    assert doc["exit_status"] == 5 and doc["metrics"] == {} and doc["tests"] == {}


@pytest.mark.parametrize("changed_by", ["another plugin", "an empty shard"])
def test_recorded_exit_status_is_the_one_pytest_exits_with(pytester: pytest.Pytester, changed_by: str) -> None:
    # pytest-testmon turns "no tests" into 0 when it deselected them, as sharding does for an
    # empty shard: the results file must not say 5 for a run that exited 0.
    pytester.makepyfile(test_mod=TRACKED)
    if changed_by == "another plugin":
        pytester.makeconftest("def pytest_sessionfinish(session):\n    session.exitstatus = 0\n")
        result, doc = _run(pytester, "-k", "no_such_test")
    else:
        result, doc = _run(pytester, "-p", "testharness.sharding", "--shard", "20/20")
    assert result.ret == 0
    assert doc["exit_status"] == 0 and doc["tests"] == {}


def test_reruns_are_recorded_as_attempts(pytester: pytest.Pytester) -> None:
    flag = pytester.path / "flag"
    pytester.makepyfile(
        test_r=f"import pathlib\nFLAG = pathlib.Path({str(flag)!r})\n"
        "def test_flaky(tracker):\n"
        "    first = not FLAG.exists()\n    FLAG.touch()\n"
        "    tracker.track('first', first)\n    assert not first\n"
    )
    result, doc = _run(pytester, "--reruns", "2")  # pytest-rerunfailures (auto-loaded)
    assert result.parseoutcomes() == {"passed": 1, "rerun": 1}
    rec = doc["tests"]["test_r.py::test_flaky"]
    assert rec["attempts"] == ["failed", "passed"] and rec["outcome"] == "passed"
    assert doc["metrics"]["test_r::test_flaky"]["first"] is False  # the final attempt's metrics


def test_results_go_to_the_configured_dir_only_for_the_test_roots(pytester: pytest.Pytester) -> None:
    pytester.makepyprojecttoml(
        '[tool.testharness]\nresults_dir = "out"\ntest_roots = ["tests/unit"]\n'
        '[tool.pytest.ini_options]\ntestpaths = ["tests/unit"]\n'
    )
    unit = pytester.mkpydir("tests")
    (unit / "unit").mkdir()
    (unit / "unit" / "test_u.py").write_text("def test_u(): pass\n")
    other = pytester.path / "other"
    other.mkdir()
    (other / "test_o.py").write_text("def test_o(): pass\n")

    pytester.runpytest_inprocess(*HARNESS_PLUGINS, "other").assert_outcomes(passed=1)
    assert not (pytester.path / "out").exists()  # an unrelated directory writes nothing

    pytester.runpytest_inprocess(*HARNESS_PLUGINS).assert_outcomes(passed=1)  # testpaths
    doc = json.loads((pytester.path / "out" / "unit_results.json").read_text())
    assert list(doc["tests"]) == ["tests/unit/test_u.py::test_u"]


def _ray_budget_s() -> float:
    """Time for the inner run: Ray's start (retried for up to NRL_RAY_START_TIMEOUT_S, 300 s by
    default, as nemo_rl.distributed.ray_cluster reads it: importing it here would tie every
    test of this file to the library), plus one attempt, an actor and pytest itself on a
    loaded machine."""
    try:
        start = float(os.environ.get("NRL_RAY_START_TIMEOUT_S") or 300)
    except ValueError:
        start = 300.0  # the inner run then stops at once, naming the variable
    return start + 300


@pytest.mark.timeout(_ray_budget_s() + 30)
def test_coverage_includes_code_run_in_ray_actors(pytester: pytest.Pytester) -> None:
    """`--cov` counts a function that only a Ray actor runs (coverage's patch=subprocess)."""
    pytester.makepyprojecttoml('[tool.coverage.run]\npatch = ["subprocess"]\n')
    pkg = pytester.mkpydir("pkg")
    (pkg / "mod.py").write_text(
        "def only_in_actor(x):\n    y = x + 1\n    return y * 2\n\n\ndef never_called():\n    return 0\n"
    )
    pytester.makepyfile(
        test_cov="""
import os

import psutil
import pytest
import ray

from nemo_rl.distributed.ray_cluster import ray_wait_timeout_s, start_local_ray
from nemo_rl.distributed.worker_group import wait_until_ready

def test_actor():
    start_local_ray(num_cpus=1)  # a cluster of its own; retried while the machine is too busy
    try:
        @ray.remote
        class Worker:
            def run(self, x):
                from pkg.mod import only_in_actor  # imported only in the actor process
                return only_in_actor(x), os.getpid()

        w = Worker.remote()
        wait_until_ready([w], ["Worker"])
        value, pid = ray.get(w.run.remote(1))
        assert value == 4
        # A graceful exit runs the worker's atexit handlers (coverage saves its data there);
        # wait for it: ray.shutdown() kills workers that are still running.
        w.__ray_terminate__.remote()
        try:
            psutil.Process(pid).wait(timeout=ray_wait_timeout_s())
        except psutil.NoSuchProcess:
            pass
        except psutil.TimeoutExpired:
            pytest.fail(f"actor Worker (pid {pid}) did not exit within {ray_wait_timeout_s():g} s of __ray_terminate__")
    finally:
        ray.shutdown()
"""
    )
    env_tmp = os.environ.get("RAY_TMPDIR") or f"/tmp/ray_harness_{os.getpid()}"
    pytester._monkeypatch.setenv("RAY_TMPDIR", env_tmp)
    out = pytester.path / "results"
    result = pytester.runpytest_subprocess(
        *HARNESS_PLUGINS, "--cov=pkg", "--cov-report=term-missing", f"--unit-results-dir={out}",
        timeout=_ray_budget_s(),
    )  # fmt: skip
    result.assert_outcomes(passed=1)
    doc = json.loads((out / "unit_results.json").read_text())
    # 4 of 5 statements: every line of only_in_actor (run in the actor), not never_called's body
    assert doc["coverage"] == pytest.approx(80.0), result.stdout.str()
    result.stdout.fnmatch_lines(["*pkg/mod.py*5*1*80%*7*"])
    assert Path(out / "unit_results").is_dir()


# --- metric keys of test files that share a name ------------------------------------------

TWO_ROOTS = '[tool.testharness]\ntest_roots = ["tests"]\n[tool.pytest.ini_options]\ntestpaths = ["tests"]\n'


def _test_file(pytester: pytest.Pytester, path: str, value: str) -> None:
    file = pytester.path / path
    for part in range(1, len(file.relative_to(pytester.path).parts)):
        folder = pytester.path.joinpath(*file.relative_to(pytester.path).parts[:part])
        folder.mkdir(exist_ok=True)
        (folder / "__init__.py").touch()  # two modules named test_x need packages
    file.write_text(f"def test(tracker):\n    tracker.track('v', {value!r})\n")


def _commit(pytester: pytest.Pytester, path: str, date: str) -> None:
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false"]
    env = {**os.environ, "GIT_AUTHOR_DATE": date, "GIT_COMMITTER_DATE": date, "GIT_CONFIG_NOSYSTEM": "1"}
    for args in (["init", "-q"], ["add", path], ["commit", "-q", "-m", path]):
        subprocess.run([*git, *args], cwd=pytester.path, env=env, check=True, capture_output=True)


def _values_by_key(doc: dict[str, Any]) -> dict[str, Any]:
    return {key: m["v"] for key, m in doc["metrics"].items()}


def test_a_same_named_file_added_later_never_renames_the_existing_keys(pytester: pytest.Pytester) -> None:
    pytester.makepyprojecttoml(TWO_ROOTS)
    _test_file(pytester, "tests/b/test_x.py", "b")
    _commit(pytester, "tests", "2020-01-01T00:00:00")
    result, doc = _run(pytester)
    assert _values_by_key(doc) == {"test_x::test": "b"}
    assert "PytestCollectionWarning" not in result.stdout.str()

    # A newcomer that sorts first: untracked, then committed, the older file keeps its keys.
    _test_file(pytester, "tests/a/test_x.py", "a")
    for committed in (False, True):
        if committed:
            _commit(pytester, "tests/a", "2021-01-01T00:00:00")
        result, doc = _run(pytester)
        result.assert_outcomes(passed=2, warnings=1)
        assert _values_by_key(doc) == {"test_x::test": "b", "tests/a/test_x::test": "a"}
        assert doc["tests"]["tests/a/test_x.py::test"]["key"] == "tests/a/test_x::test"
        result.stdout.fnmatch_lines(
            ["*PytestCollectionWarning: metric keys: test files share the name test_x.py. tests/b/test_x.py keeps"
             " test_x::<test> (git added it first); tests/a/test_x.py gets tests/a/test_x::<test>. Rename one*"]
        )  # fmt: skip

    # Whatever a run selects: the key is decided by the files, not by the collection.
    result, doc = _run(pytester, "tests/a")
    assert _values_by_key(doc) == {"tests/a/test_x::test": "a"}


def test_without_git_the_first_by_path_keeps_the_short_keys(pytester: pytest.Pytester) -> None:
    pytester.makepyprojecttoml(TWO_ROOTS)
    for path in ("tests/b/test_x.py", "tests/a/test_x.py", "tests/c/d/test_x.py"):
        _test_file(pytester, path, path.split("/")[1])
    _test_file(pytester, "tests/b/test_y.py", "y")
    result, doc = _run(pytester)
    result.assert_outcomes(passed=4, warnings=1)
    assert _values_by_key(doc) == {
        "test_x::test": "a", "tests/b/test_x::test": "b", "tests/c/d/test_x::test": "c", "test_y::test": "y",
    }  # fmt: skip
    result.stdout.fnmatch_lines(
        ["*share the name test_x.py. tests/a/test_x.py keeps test_x::<test> (the first by path: git does not tell"
         " them apart); tests/b/test_x.py gets tests/b/test_x::<test>; tests/c/d/test_x.py gets"
         " tests/c/d/test_x::<test>. Rename*"]
    )  # fmt: skip


def test_same_named_files_whose_tests_track_nothing_warn_of_nothing(pytester: pytest.Pytester) -> None:
    """Upstream NeMo RL's tree has five test_utils.py (packages, so pytest imports each under its
    own dotted name): without metrics under a long key there is nothing to say, on every run."""
    pytester.makepyprojecttoml(TWO_ROOTS)
    for path in ("tests/a/test_utils.py", "tests/b/test_utils.py", "tests/c/d/test_utils.py"):
        _test_file(pytester, path, "unused")
        (pytester.path / path).write_text("def test():\n    pass\n")
    _test_file(pytester, "tests/a/test_x.py", "a")  # tracks, short key: nothing to say either
    _test_file(pytester, "tests/b/test_x.py", "b")
    (pytester.path / "tests/b/test_x.py").write_text("def test():\n    pass\n")
    result, doc = _run(pytester)
    result.assert_outcomes(passed=5, warnings=0)
    assert _values_by_key(doc) == {"test_x::test": "a"}
    assert doc["tests"]["tests/b/test_utils.py::test"]["key"] == "tests/b/test_utils::test"  # the rule, unsaid

    # a test of a long-keyed file that tracks: said, in a run that collects it (not in one that does not)
    (pytester.path / "tests/c/d/test_utils.py").write_text("def test(tracker):\n    tracker.track('v', 1)\n")
    result, _ = _run(pytester, "tests/a", "tests/b")
    result.assert_outcomes(passed=4, warnings=0)
    result, doc = _run(pytester)
    result.assert_outcomes(passed=5, warnings=1)
    result.stdout.fnmatch_lines(["*share the name test_utils.py. tests/a/test_utils.py keeps*"])
    assert _values_by_key(doc) == {"test_x::test": "a", "tests/c/d/test_utils::test": 1}


def test_session_record_is_the_live_record_of_the_session(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(
        "import pytest\nfrom testharness.tracker import session_record\n"
        "@pytest.fixture\ndef record(request):\n    return session_record(request.config)\n"
    )
    pytester.makepyfile(
        test_s="""
import datetime

import pytest

def test_first(tracker):
    tracker.track("answer", 42)

def test_reads_it(record, tracker):
    assert record["metrics"]["test_s::test_first"]["answer"] == 42
    assert tracker.key in record["metrics"]
    assert record["tests"]["test_s.py::test_first"]["outcome"] == "passed"
    assert record["exit_status"] == "was not set"
    assert set(record) == {"exit_status", "git_commit", "start_time", "metrics", "gpu_types", "coverage",
                           "memory_unit", "memory_source", "tests"}
    datetime.datetime.strptime(record["start_time"], "%Y-%m-%d %H:%M:%S")
    with pytest.raises(TypeError):
        record["metrics"]["other"] = {}  # written through the tracker only
"""
    )
    result, doc = _run(pytester, "-p", "no:randomly")
    result.assert_outcomes(passed=2)
    assert doc["metrics"]["test_s::test_first"]["answer"] == 42


# --- the record is never false ------------------------------------------------------------------


def test_metric_keys_that_are_not_strings_fail_the_test_naming_the_metric(pytester: pytest.Pytester) -> None:
    # JSON turns 1 into "1": {1: "a", "1": "b"} was written as {"1": "b"}, silently.
    pytester.makepyfile(
        test_keys="def test_keys(tracker):\n    tracker.track('by_step', {1: 'a', '1': 'b'})\n"
        "def test_deep(tracker):\n    v = []\n    for _ in range(5000):\n        v = [v]\n"
        "    tracker.track('deep', v)\n"
    )
    result, doc = _run(pytester, "-p", "no:randomly")
    result.assert_outcomes(failed=2)
    result.stdout.fnmatch_lines([
        "*MetricError: metric 'by_step': key 1 (int) in by_step is not a string: JSON keys are strings, "
        "so it would be written as '1', merging with any key '1'; track str keys*",
        "*MetricError: metric 'deep': the value nests lists/dicts more than 100 levels deep*",
    ])  # fmt: skip
    assert "RecursionError:" not in result.stdout.str()
    assert doc["exit_status"] == 1 and set(doc["metrics"]["test_keys::test_keys"]) == {"_elapsed"}


def test_a_rewrite_that_fails_after_the_status_changed_leaves_no_record(pytester: pytest.Pytester) -> None:
    # A plugin changes the exit status after the files were written, and the dated copy can no
    # longer be replaced: the files would hold a status the run does not exit with.
    out = pytester.path / "results"
    pytester.makeconftest(
        f"import pathlib, pytest\nSESSION = []\nDATED = pathlib.Path({str(out / 'unit_results')!r})\n"
        "def pytest_sessionstart(session):\n    SESSION.append(session)\n"
        "@pytest.hookimpl(tryfirst=True)\ndef pytest_unconfigure(config):\n"
        "    SESSION[0].exitstatus = 1\n    DATED.rename(DATED.with_name('moved'))\n    DATED.write_text('')\n"
    )
    pytester.makepyfile(test_ok="def test_ok(tracker):\n    tracker.track('v', 1)\n")
    result = pytester.runpytest_inprocess(*HARNESS_PLUGINS, f"--unit-results-dir={out}")
    assert result.ret == pytest.ExitCode.INTERNAL_ERROR
    assert not (out / "unit_results.json").exists()  # (the dated copy the conftest moved away stays there)
    assert [line for line in result.errlines if line.startswith("testharness:")] == [
        f"testharness: the unit results were not written: {out / 'unit_results'}/"
        + next(line for line in result.outlines if line.startswith("unit results: ")).rsplit("/", 1)[1].rstrip(")")
        + f": {out / 'unit_results'} is a file, not a directory (exit status 3)"
    ]
