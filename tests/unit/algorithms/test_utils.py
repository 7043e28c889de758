"""The loop pieces SFT and GRPO share (nemo_rl/algorithms/utils.py), without Ray or a model."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, cast

import pytest

from nemo_rl.algorithms.utils import due, run_start_metrics, skip


def test_run_start_metrics_name_the_first_step_and_the_workers() -> None:
    policy = cast(Any, SimpleNamespace(world_size=2))
    assert run_start_metrics(policy, 1) == {"run/first_step": 1.0, "run/num_workers": 2.0}
    # A run resumed from the step-15 checkpoint trains step 16 first.
    assert run_start_metrics(policy, 16)["run/first_step"] == 16.0


@pytest.mark.parametrize(
    ("step", "period", "last", "expected"),
    [(10, 10, 40, True), (11, 10, 40, False), (13, 10, 13, True), (13, 0, 13, False)],
)
def test_due_every_period_and_at_the_last_step(step: int, period: int, last: int, expected: bool) -> None:
    assert due(step, period, last) is expected


def test_skip_advances_past_what_a_resumed_run_consumed() -> None:
    assert next(skip(iter(range(10)), 3)) == 3
