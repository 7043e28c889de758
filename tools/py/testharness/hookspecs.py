"""The harness's own hooks: what one feature plugin needs of another, asked through pytest's
hook relay (`config.hook.pytest_testharness_*`) instead of importing the other plugin, in the
manner of pytest-xdist's `newhooks.py`. testharness.plugin registers them; a project's
conftest may implement them too (`pytest_testharness_start_ray` is meant for it).

Who implements and who calls each: docs/harness-map.md ("Hooks between the plugins").
"""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.hookspec(firstresult=True)
def pytest_testharness_start_ray(config: pytest.Config, workers: int) -> str | None:
    """Start (or join) the Ray cluster that the `workers` xdist workers of this run share,
    in this process; return its address. None: the harness starts a default one.
    Called by the -n controller (testharness.parallel), in a thread of its own."""


def pytest_testharness_reassert_signal_handlers(config: pytest.Config) -> None:
    """Another library just replaced this process's signal handlers (Ray's start, xdist's
    controller): the plugin that owns the stop signals puts its handlers back.
    Called by testharness.parallel; implemented by testharness.interrupts."""


def pytest_testharness_plan_selection(config: pytest.Config) -> None:
    """The -n planner is about to read pytest-testmon's selection (its deselected files): a
    plugin that edits that selection does it now, if it has not already (once per config).
    Called by testharness.parallel; implemented by remote-aware selection."""


def pytest_testharness_file_left_out(config: pytest.Config, path: Path) -> bool:
    """Whether this run leaves out every test of the test file at `path` (a marker group that
    is off). The -n planner counts no worker for a file any implementation leaves out.
    Called by testharness.parallel; implemented by testharness.selection."""
    raise NotImplementedError  # a specification: pluggy calls the implementations, never this


def pytest_testharness_test_deadline(config: pytest.Config, seconds: float | None) -> None:
    """The hang watchdog of the test in progress fires in `seconds` from now (None: off).
    Called by hygiene's watchdog (from its timer thread too); implemented by
    testharness.supervised, whose supervisor ends a process still in that test well after it."""
