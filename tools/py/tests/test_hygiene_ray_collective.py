"""testharness.hygiene with real Ray on the CPU: a gloo all_reduce that one rank never joins
fails at its timeout naming the actor method, its file and line, and the torch frame it is
stuck in. A file of its own: its real Ray cluster and two torch actors run beside
test_hygiene_ray.py's under -n."""

from __future__ import annotations

import pytest
from hygiene_ray_project import (
    COLLECTIVE_TIMEOUT_S,
    HANG_IN_A_COLLECTIVE,
    check_hang,
    run_scenarios,
    wait_until_no_process_titled,
)


@pytest.mark.timeout(900)
def test_real_ray_a_hang_in_a_collective_fails_naming_the_rank_method_and_the_all_reduce(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    tests, result = run_scenarios(pytester, monkeypatch, HANG_IN_A_COLLECTIVE, hung=("Rank",))
    name = "TestCollective::test_hangs_in_a_collective"
    check_hang(tests, result, name, COLLECTIVE_TIMEOUT_S, "actor Rank.all_reduce", "STUCK-COLLECTIVE")
    assert (
        "in all_reduce, torch/distributed/distributed_c10d.py:" in tests[f"test_scenarios.py::{name}"]["hang"]["reason"]
    )
    assert not wait_until_no_process_titled(("ray::Rank",))
