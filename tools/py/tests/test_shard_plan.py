"""shard_plan.py: the balanced, deterministic partition behind --shard I/N."""

from __future__ import annotations

import random

import pytest

from testharness.shard_plan import (
    NO_HISTORY_SECONDS,
    ShardSpecError,
    format_plan,
    longest_files_first,
    parse_shard_id,
    parse_shard_spec,
    plan_shards,
)


@pytest.mark.parametrize("text,expected", [("1/1", (1, 1)), ("2/4", (2, 4)), (" 4 / 4 ", (4, 4))])
def test_parse_valid_specs(text: str, expected: tuple[int, int]) -> None:
    assert parse_shard_spec(text) == expected


@pytest.mark.parametrize(
    "text,message",
    [
        ("0/4", "between 1 and 4"),
        ("5/4", "between 1 and 4"),
        ("1/0", "at least 1"),
        ("2", "expects I/N"),
        ("a/b", "expects I/N"),
        ("-1/4", "expects I/N"),
        ("1/2/3", "expects I/N"),
    ],
)
def test_parse_invalid_specs_give_a_clear_message(text: str, message: str) -> None:
    with pytest.raises(ShardSpecError, match=message):
        parse_shard_spec(text)


@pytest.mark.parametrize(
    "shard_id,num_shards,expected",
    [("0", "3", (1, 3)), ("2", "3", (3, 3)), (None, "3", (1, 3)), ("0", None, (1, 1)), (None, None, (1, 1))],
)
def test_pytest_shard_ids_count_from_0_with_its_defaults(
    shard_id: str | None, num_shards: str | None, expected: tuple[int, int]
) -> None:
    # pytest-shard: --shard-id defaults to 0 and --num-shards to 1
    assert parse_shard_id(shard_id, num_shards) == expected


@pytest.mark.parametrize(
    "shard_id,num_shards,message",
    [
        ("3", "3", "--shard-id 3 --num-shards 3: the shard id must be between 0 and 2 (--shard-id counts from 0, "),
        ("1", None, "--shard-id 1 --num-shards 1: the shard id must be between 0 and 0 "),
        ("-1", "3", "--shard-id expects a whole number >= 0, got '-1'"),
        ("one", "3", "--shard-id expects a whole number >= 0, got 'one'"),
        ("0", "0", "--num-shards expects a whole number >= 1, got '0'"),
        ("0", "2.5", "--num-shards expects a whole number >= 1, got '2.5'"),
    ],
)
def test_bad_pytest_shard_ids_say_what_is_wrong(shard_id: str, num_shards: str | None, message: str) -> None:
    with pytest.raises(ShardSpecError) as info:
        parse_shard_id(shard_id, num_shards)
    assert str(info.value).startswith(message)


def _assert_partition(tests: list[str], plan_tests: list[tuple[str, ...]]) -> None:
    flat = [t for shard in plan_tests for t in shard]
    assert sorted(flat) == sorted(tests), "every test in exactly one shard"


@pytest.mark.parametrize("count", [1, 2, 3, 7, 40])
def test_every_test_lands_in_exactly_one_shard(count: int) -> None:
    tests = [f"tests/test_{i % 5}.py::test_{i}" for i in range(23)]
    durations = {t: float(i % 4) for i, t in enumerate(tests[:15])}
    plan = plan_shards(tests, durations, count)
    assert len(plan.shards) == count
    _assert_partition(tests, [s.tests for s in plan.shards])
    assert [s.index for s in plan.shards] == list(range(1, count + 1))


def test_lpt_balances_by_duration_not_by_count() -> None:
    tests = ["t::slow"] + [f"t::fast{i}" for i in range(6)]
    durations = {"t::slow": 6.0, **{f"t::fast{i}": 1.0 for i in range(6)}}
    plan = plan_shards(tests, durations, 2)
    assert [s.expected_seconds for s in plan.shards] == [6.0, 6.0]
    assert plan.shards[0].tests == ("t::slow",)
    assert plan.slowest_seconds == plan.ideal_seconds == 6.0


def test_shards_keep_collection_order() -> None:
    tests = ["m::z", "m::a", "m::y", "m::b"]
    plan = plan_shards(tests, {"m::a": 5.0, "m::b": 4.0, "m::y": 3.0, "m::z": 2.0}, 2)
    for shard in plan.shards:
        assert list(shard.tests) == [t for t in tests if t in shard.tests]


def test_plan_is_independent_of_input_and_history_order() -> None:
    rng = random.Random(7)
    tests = [f"tests/test_{i % 9}.py::test_{i}" for i in range(200)]
    # Many equal durations: the tie-breaks decide, so they must not depend on order.
    durations = {t: float(rng.choice([0.5, 1.0, 1.0, 2.0, 8.0])) for t in tests[:150]}
    reference = plan_shards(tests, durations, 4)
    shuffled = tests[:]
    rng.shuffle(shuffled)
    reversed_history = dict(reversed(list(durations.items())))
    other = plan_shards(shuffled, reversed_history, 4)
    assert [set(s.tests) for s in other.shards] == [set(s.tests) for s in reference.shards]
    assert [s.expected_seconds for s in other.shards] == [s.expected_seconds for s in reference.shards]


def test_tests_without_history_get_the_median_of_the_selection() -> None:
    tests = ["t::a", "t::b", "t::c", "t::new"]
    durations = {"t::a": 1.0, "t::b": 3.0, "t::c": 10.0, "t::elsewhere": 100.0}
    plan = plan_shards(tests, durations, 2)
    assert plan.expected["t::new"] == 3.0
    assert plan.estimated == frozenset({"t::new"})


def test_only_unknown_selected_tests_use_the_median_of_everything_recorded() -> None:
    plan = plan_shards(["t::x"], {"t::a": 2.0, "t::b": 4.0, "t::c": 9.0}, 1)
    assert plan.expected["t::x"] == 4.0


def test_no_history_at_all_counts_one_second_each() -> None:
    plan = plan_shards(["t::a", "t::b", "t::c"], {}, 2)
    assert plan.default_seconds == NO_HISTORY_SECONDS == 1.0
    assert sorted(s.expected_seconds for s in plan.shards) == [1.0, 2.0]


def test_slowest_shard_is_within_the_list_scheduling_bound() -> None:
    rng = random.Random(11)
    for _ in range(20):
        tests = [f"t::{i}" for i in range(rng.randint(1, 120))]
        durations = {t: rng.lognormvariate(0, 1.5) for t in tests}
        n = rng.randint(1, 9)
        plan = plan_shards(tests, durations, n)
        # Greedy list scheduling never exceeds total/N + the longest single test.
        assert plan.slowest_seconds <= plan.ideal_seconds + max(durations.values()) + 1e-9


def test_duplicate_ids_and_bad_counts_are_rejected() -> None:
    with pytest.raises(ValueError, match="duplicate"):
        plan_shards(["t::a", "t::a"], {}, 2)
    with pytest.raises(ShardSpecError, match="at least 1"):
        plan_shards(["t::a"], {}, 0)


def test_format_plan_lists_each_shard_and_marks_estimates() -> None:
    plan = plan_shards(["t::a", "t::b", "t::new"], {"t::a": 2.0, "t::b": 1.0}, 2)
    lines = format_plan(plan, highlight=2)
    text = "\n".join(lines)
    assert lines[0].startswith("shard plan: 2 shards, 3 tests")
    assert "shard 1/2: 1 tests, expected 2.0 s" in text
    assert "shard 2/2: 2 tests, expected 2.5 s  <- this shard" in text
    assert "t::new *" in text


def test_files_go_longest_first_and_keep_their_tests_together_in_order() -> None:
    tests = ["a.py::t1", "b.py::t1", "a.py::t2", "c.py::t1", "c.py::t2", "c.py::t3"]
    # b is one long test; c has the most tests, short ones; a's t2 has no record (median: 2 s).
    durations = {"a.py::t1": 1.0, "b.py::t1": 30.0, "c.py::t1": 2.0, "c.py::t2": 2.0, "c.py::t3": 2.0}
    assert longest_files_first(tests, durations) == [
        "b.py::t1",
        "c.py::t1",
        "c.py::t2",
        "c.py::t3",
        "a.py::t1",
        "a.py::t2",
    ]
    # Without history every test counts the same: the most tests first (xdist's own order),
    # ties by file name.
    assert longest_files_first(tests, {}) == ["c.py::t1", "c.py::t2", "c.py::t3", "a.py::t1", "a.py::t2", "b.py::t1"]
