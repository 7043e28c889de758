"""testharness.hygiene with real Ray on the CPU: a leaked actor and placement group named, a
module fixture's actor that is no leak, and hangs in an actor method (sleeping), in a task and
in a gloo all_reduce that one rank never joins, failing at their timeouts with method, file and
line (and, for the collective, the torch frame it is stuck in). One inner run, one Ray
cluster, for all of them; the scenarios are hygiene_ray_project.py's."""

from __future__ import annotations

import pytest
from hygiene_ray_project import (
    COLLECTIVE_TIMEOUT_S,
    HANG_IN_A_COLLECTIVE,
    HANG_TIMEOUT_S,
    HANGS_SLEEPING_AND_IN_A_TASK,
    LEAKS,
    check_hang,
    run_scenarios,
    wait_until_no_process_titled,
)


@pytest.mark.timeout(900)
def test_real_ray_a_leaked_actor_is_named_and_hung_actor_methods_fail_with_their_line(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    tests, result = run_scenarios(
        pytester,
        monkeypatch,
        LEAKS,
        HANGS_SLEEPING_AND_IN_A_TASK,
        HANG_IN_A_COLLECTIVE,
        hung=("Sleeper", "stuck_task", "Rank"),
    )
    out = result.stdout.str()
    leaks = tests["test_scenarios.py::test_leaks_an_actor"]["leaks"]
    assert [(x["kind"], x["what"]) for x in leaks] == [("actor", "LeakyActor"), ("placement_group", "'leaky_pg'")], out
    for clean in ("test_cleans_up", "test_uses_the_module_actor", "test_nothing_of_the_hung_tests_is_left"):
        assert tests[f"test_scenarios.py::{clean}"]["outcome"] == "passed", out
        assert "leaks" not in tests[f"test_scenarios.py::{clean}"], out  # a module fixture's actor is no leak
    result.stdout.fnmatch_lines(["*= leaks: 1 test(s) left resources behind =*", "    actor LeakyActor (id *"])

    check_hang(tests, result, "TestHangs::test_hangs_sleeping", HANG_TIMEOUT_S, "actor Sleeper.nap", "STUCK-SLEEP")
    check_hang(tests, result, "TestHangs::test_hangs_in_a_task", HANG_TIMEOUT_S, "task stuck_task", "STUCK-TASK")
    # The collective (was test_hygiene_ray_collective.py's own run): rank 0 waits in all_reduce.
    name = "TestCollective::test_hangs_in_a_collective"
    check_hang(tests, result, name, COLLECTIVE_TIMEOUT_S, "actor Rank.all_reduce", "STUCK-COLLECTIVE")
    assert (
        "in all_reduce, torch/distributed/distributed_c10d.py:" in tests[f"test_scenarios.py::{name}"]["hang"]["reason"]
    )
    # no process of the hung tests is left: killed at the timeout (checked inside the run), gone after it
    assert not wait_until_no_process_titled(("ray::Sleeper", "ray::LeakyActor", "ray::stuck_task", "ray::Rank"))
