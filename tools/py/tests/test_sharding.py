"""The --shard I/N and --shard-plan pytest options, end to end in inner pytest runs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

PLUGIN = ("-p", "testharness.sharding")

SUITE = {
    "test_slow": """
        def test_big():
            pass
        def test_medium():
            pass
    """,
    "test_many": """
        import pytest
        @pytest.mark.parametrize("i", range(8))
        def test_small(i):
            pass
        def test_marked_out():
            pass
    """,
}

DURATIONS = {
    "test_slow.py::test_big": 8.0,
    "test_slow.py::test_medium": 4.0,
    **{f"test_many.py::test_small[{i}]": 1.0 for i in range(8)},
    "test_many.py::test_marked_out": 1.0,
}


def write_history(directory: Path, durations: dict[str, float], runs: int = 3) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    for n in range(runs):
        data = {
            "exit_status": 0,
            "git_commit": "c" * 40,
            "start_time": f"2026-01-01 00:00:0{n}",
            "metrics": {},
            "tests": {
                nodeid: {"key": nodeid, "outcome": "passed", "duration": d, "attempts": ["passed"]}
                for nodeid, d in durations.items()
            },
        }
        (directory / f"20260101_00000{n}.json").write_text(json.dumps(data))


def collected(result: pytest.RunResult) -> list[str]:
    """Node ids listed by `--collect-only -q` (what the shard would run)."""
    return [line for line in result.outlines if "::" in line and not line.startswith(("shard", " "))]


@pytest.fixture
def suite(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makepyfile(**SUITE)
    write_history(pytester.path / "tests/unit_results", DURATIONS)  # no settings: results_dir is tests/
    return pytester


def test_shards_partition_the_suite_and_balance_by_duration(suite: pytest.Pytester) -> None:
    everything = collected(suite.runpytest(*PLUGIN, "--collect-only", "-q"))
    assert len(everything) == 11
    shards = []
    for i in (1, 2, 3):
        result = suite.runpytest(*PLUGIN, "--collect-only", "-q", "--shard", f"{i}/3")
        shards.append(collected(result))
    assert sorted(t for s in shards for t in s) == sorted(everything)
    expected = [sum(DURATIONS[t] for t in s) for s in shards]
    # 21 s over 3 shards: the 8 s test alone bounds the slowest shard; a split by file
    # would put test_slow.py (12 s) in one shard.
    assert sorted(expected) == [6.0, 7.0, 8.0]
    assert shards[0] == ["test_slow.py::test_big"]


def test_shards_run_one_after_another_in_one_checkout_partition_the_suite(suite: pytest.Pytester) -> None:
    # Each shard records its (different) durations in the history the next shard reads:
    # shard runs must not re-balance the plan, or shards overlap and miss tests.
    suite.makepyprojecttoml('[tool.testharness]\nresults_dir = "tests"\ntest_roots = ["."]\n')
    ran: list[str] = []
    for i in (1, 2, 3):
        result = suite.runpytest("-p", "testharness.tracker", *PLUGIN, "--shard", f"{i}/3", "-v")
        ran += [line.split(" ")[0] for line in result.outlines if " PASSED" in line]
        doc = json.loads((suite.path / "tests/unit_results.json").read_text())
        assert doc["shard"] == f"{i}/3"
    assert len(list((suite.path / "tests/unit_results").glob("*.json"))) == 3 + 3
    result.stdout.fnmatch_lines(["shard history: 3 run(s) in * (2 shard run(s) not used for balancing)"])
    assert sorted(ran) == sorted(DURATIONS)


def test_shard_runs_only_its_tests_and_says_so(suite: pytest.Pytester) -> None:
    result = suite.runpytest(*PLUGIN, "--shard", "2/3")
    result.assert_outcomes(passed=4, deselected=7)
    result.stdout.fnmatch_lines(
        [
            "shard history: 3 run(s) in *unit_results",
            "shard 2/3: 4 of 11 selected tests, expected 7.0 s (slowest shard 8.0 s, ideal 7.0 s)",
        ]
    )


def test_sharding_applies_after_keyword_and_marker_selection(suite: pytest.Pytester) -> None:
    # A conftest that deselects with a trylast hook, as testmon and the harness selection do.
    suite.makeconftest(
        """
        import pytest
        @pytest.hookimpl(trylast=True)
        def pytest_collection_modifyitems(config, items):
            drop = [i for i in items if "marked_out" in i.nodeid]
            config.hook.pytest_deselected(items=drop)
            items[:] = [i for i in items if i not in drop]
        """
    )
    shards = [
        collected(suite.runpytest(*PLUGIN, "--collect-only", "-q", "-k", "not big", "--shard", f"{i}/2"))
        for i in (1, 2)
    ]
    flat = sorted(t for s in shards for t in s)
    assert flat == sorted(t for t in DURATIONS if "big" not in t and "marked_out" not in t)
    assert len(flat) == len(set(flat))


def test_shard_plan_prints_every_shard_and_runs_nothing(suite: pytest.Pytester) -> None:
    result = suite.runpytest(*PLUGIN, "--shard", "1/2", "--shard-plan")
    assert result.ret == 0
    result.stdout.fnmatch_lines(
        [
            "shard plan: 2 shards, 11 tests, expected total 21.0 s, ideal 10.5 s/shard, slowest 11.0 s",
            "shard 1/2: 4 tests, expected 11.0 s  <- this shard",
            "      8.00 s  test_slow.py::test_big",
            "shard 2/2: 7 tests, expected 10.0 s",
        ]
    )
    result.assert_outcomes()  # nothing passed, failed or errored: no test ran
    assert "PASSED" not in result.stdout.str()


def test_tests_without_history_get_the_median(suite: pytest.Pytester) -> None:
    suite.makepyfile(test_new="def test_fresh():\n    pass\n")
    result = suite.runpytest(*PLUGIN, "--shard", "1/2", "--shard-plan")
    result.stdout.fnmatch_lines(
        ["  1 test(s) without recorded duration counted as 1.00 s (marked *)", "*test_new.py::test_fresh *"]
    )


@pytest.mark.parametrize(
    "args,message",
    [
        (["--shard", "0/3"], "ERROR: --shard 0/3: the shard index I must be between 1 and 3"),
        (["--shard", "4/3"], "ERROR: --shard 4/3: the shard index I must be between 1 and 3"),
        (["--shard", "two/3"], "ERROR: --shard expects I/N (e.g. --shard 2/4), got 'two/3'"),
        (["--shard-plan"], "ERROR: --shard-plan needs --shard I/N*"),
    ],
)
def test_bad_shard_arguments_are_usage_errors(suite: pytest.Pytester, args: list[str], message: str) -> None:
    result = suite.runpytest(*PLUGIN, *args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([message])
    assert "Traceback" not in result.stderr.str()


def test_more_shards_than_tests_leaves_empty_shards_that_pass(suite: pytest.Pytester) -> None:
    result = suite.runpytest(*PLUGIN, "--shard", "20/20")
    assert result.ret == 0
    result.assert_outcomes(deselected=11)


def test_no_test_selected_at_all_is_still_an_error(suite: pytest.Pytester) -> None:
    result = suite.runpytest(*PLUGIN, "--shard", "1/2", "-k", "no_such_test")
    assert result.ret == pytest.ExitCode.NO_TESTS_COLLECTED


def test_history_dir_from_option_env_and_pyproject(suite: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    other = suite.path / "elsewhere"
    write_history(other, {"test_slow.py::test_big": 3.0}, runs=1)
    result = suite.runpytest(*PLUGIN, "--shard", "1/2", "--shard-plan", "--history-dir", str(other))
    result.stdout.fnmatch_lines([f"shard history: 1 run(s) in {other}"])

    monkeypatch.setenv("TESTHARNESS_HISTORY_DIR", str(other))
    result = suite.runpytest(*PLUGIN, "--shard", "1/2", "--shard-plan")
    result.stdout.fnmatch_lines([f"shard history: 1 run(s) in {other}"])
    monkeypatch.delenv("TESTHARNESS_HISTORY_DIR")

    suite.makepyprojecttoml('[tool.testharness]\nresults_dir = "out"\n')
    write_history(suite.path / "out/unit_results", DURATIONS, runs=2)
    result = suite.runpytest(*PLUGIN, "--shard", "1/2", "--shard-plan")
    result.stdout.fnmatch_lines([f"shard history: 2 run(s) in {suite.path / 'out/unit_results'}"])


def test_malformed_history_is_skipped_with_a_warning(suite: pytest.Pytester) -> None:
    (suite.path / "tests/unit_results/20260101_000009.json").write_text('{"tests": ')
    result = suite.runpytest(*PLUGIN, "--shard", "1/3")
    result.stdout.fnmatch_lines(
        ["shard history: 3 run(s) in *", "shard history warning: skipped *20260101_000009.json: not valid JSON*"]
    )
    result.assert_outcomes(passed=1, deselected=10)


def test_without_shard_options_nothing_changes(suite: pytest.Pytester) -> None:
    result = suite.runpytest(*PLUGIN)
    result.assert_outcomes(passed=11)
    assert "shard history" not in result.stdout.str()


# ------------------------------------------------- pytest-shard's --shard-id / --num-shards


@pytest.mark.parametrize("form", ["equals", "two-tokens"])
def test_pytest_shard_flags_choose_the_same_shards_counted_from_0(suite: pytest.Pytester, form: str) -> None:
    by_id = []
    for i in (0, 1, 2):
        flags = (
            [f"--shard-id={i}", "--num-shards=3"] if form == "equals" else ["--shard-id", str(i), "--num-shards", "3"]
        )
        by_id.append(collected(suite.runpytest(*PLUGIN, "--collect-only", "-q", *flags)))
    by_spec = [collected(suite.runpytest(*PLUGIN, "--collect-only", "-q", "--shard", f"{i}/3")) for i in (1, 2, 3)]
    assert by_id == by_spec  # shard-id I is --shard I+1/N: the same duration-balanced plan
    assert sorted(t for s in by_id for t in s) == sorted(DURATIONS)


def test_a_shard_id_run_records_and_says_its_shard_as_i_of_n(suite: pytest.Pytester) -> None:
    suite.makepyprojecttoml('[tool.testharness]\nresults_dir = "tests"\ntest_roots = ["."]\n')
    result = suite.runpytest("-p", "testharness.tracker", *PLUGIN, "--shard-id=1", "--num-shards=3")
    result.assert_outcomes(passed=4, deselected=7)
    result.stdout.fnmatch_lines(["shard 2/3: 4 of 11 selected tests, *"])
    assert json.loads((suite.path / "tests/unit_results.json").read_text())["shard"] == "2/3"


def test_num_shards_alone_is_shard_0_as_in_pytest_shard(suite: pytest.Pytester) -> None:
    alone = collected(suite.runpytest(*PLUGIN, "--collect-only", "-q", "--num-shards=3"))
    assert alone == collected(suite.runpytest(*PLUGIN, "--collect-only", "-q", "--shard", "1/3"))


def test_shard_plan_works_with_shard_id(suite: pytest.Pytester) -> None:
    result = suite.runpytest(*PLUGIN, "--shard-id=0", "--num-shards=2", "--shard-plan")
    assert result.ret == 0
    result.stdout.fnmatch_lines(["shard 1/2: 4 tests, expected 11.0 s  <- this shard"])


@pytest.mark.parametrize(
    "args,message",
    [
        (
            ["--shard-id=3", "--num-shards=3"],
            "ERROR: --shard-id 3 --num-shards 3: the shard id must be between 0 and 2 *",
        ),
        (["--shard-id=-1", "--num-shards=3"], "ERROR: --shard-id expects a whole number >= 0, got '-1'"),
        (["--shard-id=0", "--num-shards=0"], "ERROR: --num-shards expects a whole number >= 1, got '0'"),
        (["--shard-id=1"], "ERROR: --shard-id 1 --num-shards 1: *"),
        (
            ["--shard", "1/3", "--shard-id=0", "--num-shards=3"],
            "ERROR: --shard and --shard-id/--num-shards both choose a shard: give one (--shard-id=0 --num-shards=3 is --shard 1/3)",
        ),
    ],
)
def test_bad_shard_ids_and_mixing_with_shard_are_usage_errors(
    suite: pytest.Pytester, args: list[str], message: str
) -> None:
    result = suite.runpytest(*PLUGIN, *args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([message])
    assert "Traceback" not in result.stderr.str()


def test_where_pytest_shard_is_loaded_its_flags_are_its_own(suite: pytest.Pytester) -> None:
    # A stand-in for pytest-shard (its module path and flags; it keeps the even-numbered
    # tests): both plugins defining --shard-id would stop pytest before it starts.
    package = suite.mkpydir("pytest_shard")
    (package / "pytest_shard.py").write_text(
        "def pytest_addoption(parser):\n"
        "    group = parser.getgroup('shard')\n"
        "    group.addoption('--shard-id', dest='shard_id', type=int, default=0)\n"
        "    group.addoption('--num-shards', dest='num_shards', type=int, default=1)\n"
        "def pytest_collection_modifyitems(config, items):\n"
        "    n, i = config.getoption('num_shards'), config.getoption('shard_id')\n"
        "    items[:] = [item for k, item in enumerate(items) if k % n == i]\n"
    )
    result = suite.runpytest_subprocess(
        "-p", "pytest_shard.pytest_shard", *PLUGIN, "--shard-id=1", "--num-shards=2", "-q"
    )
    assert result.ret == 0, result.stderr.str()
    result.assert_outcomes(passed=5)  # its split of 11 tests (ours would be 7 and 4)
    assert "shard history" not in result.stdout.str()
