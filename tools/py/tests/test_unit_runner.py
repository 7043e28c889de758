"""unit_runner: upstream-style `unit/...` paths (positional, --ignore, --deselect, globs), the
option checks (exclusive groups, missing requirements), the closing line for pytest's exit
code, and run_unit on a pytester project (what ran, the last line, the exit code)."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

import pytest

from testharness import requirements
from testharness.exit_codes import verdict as interpret_exit
from testharness.settings import MarkerGroup, load_settings
from testharness.unit_runner import build_assets, usage
from testharness.upstream_paths import has_path_arg, map_upstream_paths

MCORE = MarkerGroup(
    name="mcore", option="--mcore-only", mode="only", requires=("megatron.core",),
    requires_name="megatron-core", hint="uv run --extra mcore ...",
)  # fmt: skip


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    (tmp_path / "tests" / "unit" / "tools").mkdir(parents=True)
    (tmp_path / "tests" / "unit" / "tools" / "test_a.py").write_text("")
    return tmp_path


def test_unit_paths_map_to_the_test_root(tree: Path) -> None:
    roots = [tree / "tests" / "unit"]
    args = ["unit/tools/test_a.py", "unit/tools/test_a.py::test_x[p]", "unit/", "-x"]
    assert map_upstream_paths(args, tree, roots) == [
        "tests/unit/tools/test_a.py", "tests/unit/tools/test_a.py::test_x[p]", "tests/unit", "-x",
    ]  # fmt: skip


def test_paths_that_exist_as_given_or_nowhere_are_kept(tree: Path) -> None:
    roots = [tree / "tests" / "unit"]
    (tree / "unit").mkdir()  # ./unit exists: it is what the user means
    kept = ["unit/", "unit/nope.py", "other/x.py"]
    assert map_upstream_paths(kept, tree, roots) == kept
    (tree / "unit").rmdir()
    # An option's value without a slash is never a candidate (-k unit).
    assert map_upstream_paths(["-k", "unit", "unit/nope.py"], tree, roots) == ["-k", "unit", "unit/nope.py"]


def test_from_the_tests_directory_nothing_changes(tree: Path) -> None:
    cwd = tree / "tests"
    assert map_upstream_paths(["unit/tools/test_a.py"], cwd, [cwd / "unit"]) == ["unit/tools/test_a.py"]


def _probe(missing: str | None) -> requirements.Probe:
    def probe(modules: Sequence[str]) -> str | None:
        return missing

    return probe


def test_a_requirement_is_checked_only_when_its_option_is_given() -> None:
    gone = _probe("No module named 'megatron'")
    assert requirements.first_missing_requirement(["-x"], [MCORE], gone) is None
    assert requirements.first_missing_requirement(["--mcore-only"], [MCORE], _probe(None)) is None
    assert requirements.first_missing_requirement(["--mcore-only"], [MCORE], gone) == (
        "--mcore-only needs megatron-core, which cannot be imported (No module named 'megatron'); "
        "run it as: uv run --extra mcore ..."
    )


def test_spec_error_finds_without_importing() -> None:
    assert requirements.spec_error(["json", "os.path"]) is None
    assert requirements.spec_error(["no_such_module_xyz"]) == "No module named 'no_such_module_xyz'"
    assert requirements.spec_error(["json.no_such_sub"]) == "No module named 'json.no_such_sub'"
    assert requirements.spec_error(["no_such_module_xyz.core"]) == "No module named 'no_such_module_xyz'"


VLLM = MarkerGroup(
    name="vllm", option="--vllm-only", mode="only", exclusive=True, requires=("vllm",), requires_name="vllm",
    remedy="this project has no vllm extra: add one",
)  # fmt: skip
MCORE_X = MarkerGroup(name="mcore", option="--mcore-only", mode="only", exclusive=True)
SGLANG = MarkerGroup(name="sglang", option="--sglang-only", mode="only", exclusive=True)
SLOW = MarkerGroup(name="slow", option="--slow-only", mode="only")  # not exclusive


@pytest.fixture
def upstream_tree(tree: Path) -> Path:
    gen = tree / "tests" / "unit" / "models" / "generation"
    gen.mkdir(parents=True)
    (gen / "test_vllm_a.py").write_text("")
    (gen / "test_vllm_b.py").write_text("")
    (gen / "test_hf.py").write_text("")
    return tree


def test_ignore_and_deselect_values_are_mapped_in_both_spellings(upstream_tree: Path) -> None:
    # upstream's L0 scripts: run_unit.sh unit/ --ignore=unit/models/generation/ ...
    roots = [upstream_tree / "tests" / "unit"]
    args = [
        "unit/", "--ignore=unit/models/generation/", "--ignore", "unit/tools/test_a.py",
        "--ignore-glob=unit/models/*/test_vllm*.py", "--deselect", "unit/tools/test_a.py::test_x",
        "--deselect=unit/models/", "-k", "unit/tools",
    ]  # fmt: skip
    assert map_upstream_paths(args, upstream_tree, roots, upstream_tree) == [
        "tests/unit", "--ignore=tests/unit/models/generation/", "--ignore", "tests/unit/tools/test_a.py",
        "--ignore-glob=tests/unit/models/*/test_vllm*.py", "--deselect", "tests/unit/tools/test_a.py::test_x",
        "--deselect=tests/unit/models/", "-k", "unit/tools",
    ]  # fmt: skip


def test_from_the_tests_directory_a_deselect_becomes_a_node_id(upstream_tree: Path) -> None:
    # pytest matches --deselect against node ids, which are relative to its rootdir (the
    # project root), not to the directory you run from.
    cwd = upstream_tree / "tests"
    args = ["unit/", "--ignore=unit/models/generation/", "--deselect", "unit/tools/test_a.py::test_x"]
    assert map_upstream_paths(args, cwd, [cwd / "unit"], upstream_tree) == [
        "unit/", "--ignore=unit/models/generation/", "--deselect", "tests/unit/tools/test_a.py::test_x",
    ]  # fmt: skip


def test_option_values_naming_nothing_are_kept(upstream_tree: Path) -> None:
    roots = [upstream_tree / "tests" / "unit"]
    kept = [
        "--ignore=unit/nope/",
        "--deselect",
        "other/x.py::t",
        "--ignore-glob=unit/*/nope*.py",
        "--deselect=/abs/x.py",
    ]
    assert map_upstream_paths(kept, upstream_tree, roots, upstream_tree) == kept


def test_a_glob_is_expanded_as_upstreams_unquoted_arguments_are(upstream_tree: Path) -> None:
    roots = [upstream_tree / "tests" / "unit"]
    args = ["unit/models/generation/test_vllm*.py", "unit/tools/test_nope*.py"]
    assert map_upstream_paths(args, upstream_tree, roots) == [
        "tests/unit/models/generation/test_vllm_a.py",
        "tests/unit/models/generation/test_vllm_b.py",
        "unit/tools/test_nope*.py",  # matches nothing: pytest says so
    ]
    cwd = upstream_tree / "tests"
    assert map_upstream_paths(["unit/models/generation/test_vllm*.py"], cwd, [cwd / "unit"]) == [
        "unit/models/generation/test_vllm_a.py",
        "unit/models/generation/test_vllm_b.py",
    ]


def test_an_option_value_is_not_a_test_path(upstream_tree: Path) -> None:
    cwd = upstream_tree / "tests"  # `unit` exists here
    assert not has_path_arg(["-k", "unit"], cwd)
    assert not has_path_arg(["--ignore", "unit/tools"], cwd)
    assert not has_path_arg(["--ignore=unit/tools", "-x"], cwd)
    assert has_path_arg(["-k", "x", "unit"], cwd)
    assert has_path_arg(["unit/tools/test_a.py::test_x"], cwd)


def test_exclusive_options_are_one_line() -> None:
    groups = [MCORE_X, VLLM, SGLANG, SLOW]
    assert requirements.exclusive_conflict(["--vllm-only", "-x"], groups) is None
    assert requirements.exclusive_conflict(["--vllm-only", "--slow-only"], groups) is None
    assert requirements.exclusive_conflict(["--vllm-only", "--mcore-only"], groups) == (
        "--mcore-only and --vllm-only are mutually exclusive: give one of --mcore-only, --vllm-only, --sglang-only"
    )
    assert requirements.exclusive_conflict(["--sglang-only", "--vllm-only", "--mcore-only"], groups) == (
        "--mcore-only, --vllm-only and --sglang-only are mutually exclusive: "
        "give one of --mcore-only, --vllm-only, --sglang-only"
    )


def test_the_conflict_is_reported_before_a_missing_requirement() -> None:
    gone = _probe("No module named 'vllm'")
    groups = [MCORE_X, VLLM]
    assert "mutually exclusive" in (
        requirements.first_option_problem(["--vllm-only", "--mcore-only"], groups, gone) or ""
    )
    assert requirements.first_option_problem(["--vllm-only"], groups, gone) == (
        "--vllm-only needs vllm, which cannot be imported (No module named 'vllm'); "
        "this project has no vllm extra: add one"
    )
    assert requirements.first_option_problem(["--vllm-only"], groups, _probe(None)) is None


def test_usage_says_which_options_go_one_at_a_time() -> None:
    text = usage([MCORE_X, VLLM, SLOW])
    assert "  --vllm-only         run only tests marked vllm (needs vllm)\n" in text
    assert "  (--mcore-only, --vllm-only: one at a time)\n" in text


def test_usage_names_the_command_the_user_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TESTHARNESS_PROG", raising=False)
    text = usage([MCORE_X])
    assert text.startswith("usage: testharness run-unit [--mcore-only] [--rerun-failures N]\n" + " " * 28 + "[--shard")
    assert "tests/unit" not in text and "run_unit.sh" not in text  # nothing of this repository's
    monkeypatch.setenv("TESTHARNESS_PROG", "bash scripts/unit.sh")  # a wrapper script names itself
    assert usage([]).startswith("usage: bash scripts/unit.sh [--rerun-failures N]\n" + " " * 28 + "[--shard")
    assert usage([], prog="python -m testharness.unit_runner").startswith("usage: python -m testharness.unit_runner ")


def test_assets_are_built_only_where_the_project_names_a_script(tmp_path: Path) -> None:
    script = tmp_path / "make_assets.py"
    script.write_text("import pathlib\nwith open('built.log', 'a') as f: f.write('x')\n")
    (tmp_path / "pyproject.toml").write_text("[tool.testharness]\n")
    assert build_assets(load_settings(tmp_path)) == 0  # no script by default: no step
    assert not (tmp_path / "built.log").exists()
    (tmp_path / "pyproject.toml").write_text('[tool.testharness]\nassets_script = "make_assets.py"\n')
    for _ in range(2):  # no assets_dir: every run
        assert build_assets(load_settings(tmp_path)) == 0
    assert (tmp_path / "built.log").read_text() == "xx"
    (tmp_path / "pyproject.toml").write_text(
        '[tool.testharness]\nassets_script = "make_assets.py"\nassets_dir = "assets"\n'
    )
    assert build_assets(load_settings(tmp_path)) == 0  # missing: built
    (tmp_path / "assets").mkdir()
    (tmp_path / "assets" / "model.bin").write_text("")
    assert build_assets(load_settings(tmp_path)) == 0  # there: not again
    assert (tmp_path / "built.log").read_text() == "xxx"


def test_pytests_exit_2_without_a_signal_is_named_a_collection_error() -> None:
    status, line = interpret_exit(2, {"collected": 3, "deselected": 0, "results": None})
    assert status == 2
    assert line.startswith("run_unit: stopped by errors during collection")
    assert "Ctrl-C" not in line
    # a stop signal that reached run_unit is named as such
    assert interpret_exit(2, None, "SIGINT") == (2, "run_unit: interrupted by SIGINT")


RESULTS = {"results": "tests/unit/unit_results.json"}
WHERE = "; results of the tests that ran: tests/unit/unit_results.json"


@pytest.mark.parametrize(
    ("stopped", "line"),
    [
        ({"by": "pytest", "reason": "Test failed, continuing from this test next run."},
         "run_unit: pytest stopped the run early: Test failed, continuing from this test next run." + WHERE),
        ({"by": "collection", "reason": "2 errors during collection"},
         "run_unit: stopped by errors during collection (2 errors during collection; see the ERROR lines above)"),
        ({"by": "exit", "reason": "no GPU"}, "run_unit: stopped by pytest.exit(): no GPU" + WHERE),
        ({"by": "signal", "reason": "SIGTERM"}, "run_unit: interrupted by SIGTERM" + WHERE),
        ({"by": "KeyboardInterrupt", "reason": ""},
         "run_unit: stopped by a KeyboardInterrupt raised in a test or plugin (no stop signal)" + WHERE),
    ],
    ids=["stepwise", "collection", "pytest.exit", "signal-to-pytest", "KeyboardInterrupt"],
)  # fmt: skip
def test_an_early_stop_is_worded_as_what_stopped_it(stopped: dict[str, str], line: str) -> None:
    assert interpret_exit(2, {**RESULTS, "stopped": stopped}) == (2, line)


@pytest.mark.parametrize(
    ("tests_status", "stopped_by", "tests_said"),
    [(0, None, "all selected tests passed"), (1, None, "some tests failed (see the summary above)"),
     (2, "SIGTERM", "interrupted by SIGTERM")],
)  # fmt: skip
def test_results_that_were_not_written_fail_the_run_whatever_the_tests_did(
    tests_status: int, stopped_by: str | None, tests_said: str
) -> None:
    summary = {"results": None, "results_error": "out/unit_results.json: No space left on device",
               "tests_exit_status": tests_status}  # fmt: skip
    assert interpret_exit(3, summary, stopped_by) == (
        3,
        f"run_unit: FAILED: no results were written (out/unit_results.json: No space left on device); "
        f"the tests: {tests_said}",
    )


# --- run_unit on a pytester project -------------------------------------------------------

UPSTREAM_PROJECT = """
[tool.pytest.ini_options]
addopts = ["--strict-markers"]

[tool.testharness]
test_roots = ["tests/unit"]
results_dir = "tests/unit"

[tool.testharness.marker_groups.vllm]
option = "--vllm-only"
mode = "only"
exclusive = true
requires = ["vllm_not_installed_xyz"]
requires_name = "vllm"
remedy = "this project has no vllm extra: add one"

[tool.testharness.marker_groups.mcore]
option = "--mcore-only"
mode = "only"
exclusive = true
"""


@pytest.fixture
def upstream_project(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    pytester.makepyprojecttoml(UPSTREAM_PROJECT)
    unit = pytester.path / "tests" / "unit"
    (unit / "models" / "generation").mkdir(parents=True)
    (unit / "test_upstream_style.py").write_text(
        "import pytest\n\ndef test_plain(): pass\n\n@pytest.mark.vllm\ndef test_vllm(): pass\n"
        "\ndef test_drop():\n    raise AssertionError('deselected test ran')\n"
    )
    (unit / "models" / "generation" / "test_ignored.py").write_text(
        "def test_must_not_run():\n    raise AssertionError('ignored file ran')\n"
    )
    monkeypatch.setenv("TESTHARNESS_ROOT", str(pytester.path))
    monkeypatch.setenv("TESTHARNESS_NO_DISCOVERY", "1")
    return pytester


def _run_unit(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.run(sys.executable, "-m", "testharness.unit_runner", *args, timeout=120)


def test_run_unit_ignores_and_deselects_upstream_paths_from_the_root(upstream_project: pytest.Pytester) -> None:
    result = _run_unit(
        upstream_project, "unit/", "--ignore=unit/models/generation/",
        "--deselect", "unit/test_upstream_style.py::test_drop", "-v",
    )  # fmt: skip
    assert result.ret == 0, result.stdout.str() + result.stderr.str()
    ran = {line.split("::")[-1].split()[0] for line in result.outlines if " PASSED" in line or " FAILED" in line}
    assert ran == {"test_plain"}  # not the ignored file, the deselected test, nor the vllm test
    result.stdout.fnmatch_lines(["*1 passed, 2 deselected*", "run_unit: all selected tests passed"])


def test_run_unit_vllm_only_without_vllm_is_one_line(upstream_project: pytest.Pytester) -> None:
    result = _run_unit(upstream_project, "unit/", "--vllm-only")
    assert result.ret == 2
    assert result.outlines == []
    assert [line for line in result.errlines if line.strip()] == [
        "run_unit: --vllm-only needs vllm, which cannot be imported (No module named 'vllm_not_installed_xyz'); "
        "this project has no vllm extra: add one"
    ]


def test_run_unit_exclusive_options_are_one_line(upstream_project: pytest.Pytester) -> None:
    result = _run_unit(upstream_project, "--mcore-only", "--vllm-only")
    assert result.ret == 2
    assert result.outlines == []
    assert [line for line in result.errlines if line.strip()] == [
        "run_unit: --vllm-only and --mcore-only are mutually exclusive: give one of --vllm-only, --mcore-only"
    ]


def test_run_unit_names_a_collection_error(upstream_project: pytest.Pytester) -> None:
    (upstream_project.path / "tests" / "unit" / "test_broken.py").write_text("import no_such_module_xyz\n")
    result = _run_unit(upstream_project)
    assert result.ret == 2
    result.stdout.fnmatch_lines(["*1 error in*"])  # not "Interrupted": the other files ran
    last = [line for line in result.errlines if line.strip()][-1]
    assert last == (
        "run_unit: FAILED: 1 test file(s) could not be collected: tests/unit/test_broken.py: "
        "ModuleNotFoundError: No module named 'no_such_module_xyz' (see the ERROR lines above)"
    ), result.errlines
    assert "Ctrl-C" not in result.stdout.str() + result.stderr.str()
