"""What the harness's pytest plugins share, written down once.

Each feature is a plugin module of its own (testharness.plugin lists them); no plugin module
imports another (tools/py/tests/test_house_rules.py). They meet only through what this
module declares, the harness's own hooks (hookspecs.py: what one plugin asks of another,
through `config.hook`) and the cores (modules with no hooks):

- **Settings**: `[tool.testharness]` is read once per pytest config (`settings_of`, kept in the
  config's stash): the first plugin that asks reads it (selection, in
  `pytest_load_initial_conftests`, to add the marker groups' options), every other gets the
  same object. A malformed table is a `pytest.UsageError`: one `ERROR:` line, exit 4, before
  collection. `configured` says whether the table exists at all: where the harness is merely
  installed, the plugins keep out of the way (no Ray cluster for -n, no results file, no
  hygiene, no signal takeover).
- **xdist roles**: `is_xdist_worker` (a process that runs tests for a controller) and
  `is_xdist_controller` (the process that runs `pytest -n N`, which runs no test itself).
- **Report extras**: what a plugin hangs on a test report for another plugin (and, from an
  xdist worker, for the controller: xdist serialises a report's attributes), named only from
  `EXTRAS` through `put_extra` / `get_extra`.
- **The record**: the recorder keeps the run's record (testharness.record) in the config's
  stash; the tracker and supervised reach it through `record_of(config)`.
- **History**: `-n`'s file order and `--shard` plan with the runs recorded in
  `history_dir_of(config)` (`--history-dir`, else where `--unit-results-dir` sends results).
- **Signals**: `-n`'s controller has the harness's signal handlers put back after Ray's start
  replaced them (the hook `pytest_testharness_reassert_signal_handlers`).

Who sets and reads each extra, and the order the plugins' hooks run in (and why): the tables
of docs/harness-map.md, which a change to a `tryfirst`/`trylast`/`wrapper` updates.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Final

import pytest

from testharness.history import resolve_history_dir
from testharness.record import Record
from testharness.run_binding import Binding, this_process
from testharness.settings import Settings, SettingsError, load_settings

_SETTINGS = pytest.StashKey[Settings]()
_RECORD = pytest.StashKey[Record]()  # the run's record: the recorder puts it there at configure
_RUN = pytest.StashKey[Binding]()  # this config's part in run_unit's run (run_binding)
_CLAIMED: list[int] = []  # the config of this process that is the supervised run's (one at most)

EXTRAS: Final = frozenset({
    "testharness_metrics", "testharness_memory", "testharness_leaks", "testharness_hang",
    "testharness_crash", "testharness_child_exit", "remote_reach",
})  # fmt: skip


def settings_of(config: pytest.Config) -> Settings:
    """`[tool.testharness]` of the project pytest runs in, read once per config."""
    settings = config.stash.get(_SETTINGS, None)
    if settings is None:
        try:
            settings = load_settings(config.rootpath)
        except SettingsError as exc:
            raise pytest.UsageError(str(exc)) from None
        config.stash[_SETTINGS] = settings
    return settings


def register_for(config: pytest.Config, plugin: object, name: str) -> None:
    """Register a plugin object that belongs to this config (a recorder, a hygiene checker...),
    and unregister it once the config is unconfigured, as pytest's own junitxml does: an
    in-process inner run (pytester) leaves no object of its own behind in the plugin manager."""
    config.pluginmanager.register(plugin, f"{name}-{id(config)}")

    def unregister() -> None:
        if config.pluginmanager.is_registered(plugin):
            config.pluginmanager.unregister(plugin)

    config.add_cleanup(unregister)  # runs after every pytest_unconfigure


def stash_record(config: pytest.Config, record: Record) -> None:
    config.stash[_RECORD] = record


def record_of(config: pytest.Config) -> Record | None:
    """This session's record in the making (None where the recorder is not loaded)."""
    return config.stash.get(_RECORD, None)


def run_of(config: pytest.Config) -> Binding:
    """This config's part in run_unit's run (testharness.run_binding): the process's binding for
    the first config that asks (the session pytest, or the xdist worker, runs); a pytester run
    inside the same process is inside that run without being it (`nested`)."""
    binding = config.stash.get(_RUN, None)
    if binding is None:
        binding = this_process()
        if binding.supervisor_pid is not None:
            if _CLAIMED and _CLAIMED[0] != id(config):
                binding = Binding(nested=True)
            else:
                _CLAIMED[:] = [id(config)]
        config.stash[_RUN] = binding
    return binding


def history_dir_of(config: pytest.Config) -> Path:
    """The results history this run plans with (history.resolve_history_dir of its options),
    from the settings read once (`settings_of`: a malformed table is its UsageError)."""
    return resolve_history_dir(
        config.getoption("history_dir", None),
        config.rootpath,
        results_dir=config.getoption("unit_results_dir", None),
        settings=settings_of(config),
    )


def is_xdist_worker(config: pytest.Config) -> bool:
    return hasattr(config, "workerinput")


def gpus_shared() -> bool:
    """Whether other tests use this machine's GPUs at the same time: this is an xdist worker
    of several, or a pytest run inside one. xdist sets PYTEST_XDIST_WORKER_COUNT in a worker's
    environment before its config exists; child processes and in-process runs inherit it.
    (The GPU leak check is then off; the tracker reads the test's own processes.)"""
    return int(os.environ.get("PYTEST_XDIST_WORKER_COUNT") or 1) > 1


def is_xdist_controller(config: pytest.Config) -> bool:
    return bool(getattr(config.option, "numprocesses", None)) and not is_xdist_worker(config)


def put_extra(report: pytest.TestReport | pytest.CollectReport, name: str, value: Any) -> None:
    """Hang `value` on `report` as the extra `name` (one of EXTRAS)."""
    if name not in EXTRAS:
        raise KeyError(f"{name!r} is not a declared report extra (testharness.contract.EXTRAS)")
    setattr(report, name, value)


def get_extra(report: pytest.TestReport | pytest.CollectReport, name: str) -> Any:
    """The extra `name` (one of EXTRAS) of `report`, None when no plugin set it."""
    if name not in EXTRAS:
        raise KeyError(f"{name!r} is not a declared report extra (testharness.contract.EXTRAS)")
    return getattr(report, name, None)
