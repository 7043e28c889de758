"""pytest options `--shard I/N` and `--shard-plan`: duration-balanced shards from history.

A thin adapter: the durations come from `history.py`, the partition from `shard_plan.py`.
Sharding is applied after every other selection (-k, -m, --hf-gated, testmon, ...) so the
N shards together run exactly the tests one unsharded run would.

pytest-shard's `--shard-id I --num-shards N` (I from 0), which upstream NeMo RL's L0 scripts
pass, choose the same shards: they become `--shard I+1/N` at configure, so the record, the
plan and every reader see one form. Where pytest-shard itself is loaded, the two flags are
its own (hash-based shards) and this module does not define them.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Generator
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pytest

from testharness.contract import history_dir_of
from testharness.history import HISTORY_ENV, History, load_history, planning_durations

if TYPE_CHECKING:
    from testharness.shard_plan import ShardPlan


@dataclass
class _ShardState:
    index: int
    count: int
    plan_only: bool
    history: History | None = None
    plan: ShardPlan | None = None
    selected: int = 0  # tests selected before sharding


_STATE = pytest.StashKey[_ShardState]()


def _pytest_shard_loaded(pluginmanager: pytest.PytestPluginManager) -> bool:
    """Whether pytest-shard (entry point `pytest-shard`) defines --shard-id/--num-shards in this
    run: two plugins adding one flag stop pytest before it starts."""
    if pluginmanager.has_plugin("pytest-shard") or pluginmanager.has_plugin("pytest_shard.pytest_shard"):
        return True
    if os.environ.get("PYTEST_DISABLE_PLUGIN_AUTOLOAD") or pluginmanager.is_blocked("pytest-shard"):
        return False
    return importlib.util.find_spec("pytest_shard") is not None  # installed: its entry point loads it


def pytest_addoption(parser: pytest.Parser, pluginmanager: pytest.PytestPluginManager) -> None:
    group = parser.getgroup("testharness-shards", "duration-balanced shards (testharness)")
    group.addoption(
        "--shard",
        metavar="I/N",
        default=None,
        help="run only shard I of N; shards are balanced by the test durations recorded in the history files",
    )
    if not _pytest_shard_loaded(pluginmanager):
        group.addoption(
            "--shard-id",
            metavar="I",
            default=None,
            help="pytest-shard's form: shard I, counted from 0, of --num-shards N (the same shards as --shard I+1/N)",
        )
        group.addoption(
            "--num-shards",
            metavar="N",
            default=None,
            help="pytest-shard's form: the number of shards (with --shard-id; --shard-id defaults to 0)",
        )
    group.addoption(
        "--shard-plan",
        action="store_true",
        default=False,
        help="with --shard I/N: print every shard's tests and expected seconds, then exit without running tests",
    )
    group.addoption(
        "--history-dir",
        metavar="DIR",
        default=None,
        help=f"results history to balance shards and -n's file order with (default: ${HISTORY_ENV}, else "
        "unit_results/ of --unit-results-dir or $TESTHARNESS_RESULTS_DIR, else of [tool.testharness] results_dir)",
    )


def pytest_configure(config: pytest.Config) -> None:
    spec = config.getoption("shard")
    plan_only = bool(config.getoption("shard_plan"))
    if not _pytest_shard_loaded(config.pluginmanager):
        spec = _from_shard_id(config, spec)
    if spec is None:
        if plan_only:
            raise pytest.UsageError("--shard-plan needs --shard I/N to know how many shards to plan (e.g. --shard 1/4)")
        return
    from testharness.shard_plan import ShardSpecError, parse_shard_spec  # deferred: a run that shards (~6 ms)

    try:
        index, count = parse_shard_spec(spec)
    except ShardSpecError as exc:
        raise pytest.UsageError(str(exc)) from None
    config.stash[_STATE] = _ShardState(index=index, count=count, plan_only=plan_only)


def _from_shard_id(config: pytest.Config, spec: str | None) -> str | None:
    """--shard-id/--num-shards as --shard I+1/N, written back to the option (the record and the
    supervisor read `shard`); a usage error when they are bad or given with --shard."""
    shard_id, num_shards = config.getoption("shard_id", None), config.getoption("num_shards", None)
    if shard_id is None and num_shards is None:
        return spec
    if spec is not None:
        raise pytest.UsageError(
            "--shard and --shard-id/--num-shards both choose a shard: give one "
            "(--shard-id=0 --num-shards=3 is --shard 1/3)"
        )
    from testharness.shard_plan import ShardSpecError, parse_shard_id

    try:
        index, count = parse_shard_id(shard_id, num_shards)
    except ShardSpecError as exc:
        raise pytest.UsageError(str(exc)) from None
    config.option.shard = f"{index}/{count}"
    return str(config.option.shard)


# A wrapper, and the outermost one: its code after `yield` runs once every other
# implementation (pytest's -k/-m, the harness's selection, testmon's trylast one) is done.
@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_collection_modifyitems(
    session: pytest.Session, config: pytest.Config, items: list[pytest.Item]
) -> Generator[None, None, None]:
    yield
    state = config.stash.get(_STATE, None)
    if state is None:
        return
    from testharness.shard_plan import plan_shards

    state.history = load_history(history_dir_of(config))
    nodeids = list(dict.fromkeys(item.nodeid for item in items))  # unique, in collection order
    state.selected = len(nodeids)
    # Shard runs do not re-balance: run one after another in one checkout, shard 2 would
    # otherwise plan with the durations shard 1 just recorded and overlap it.
    state.plan = plan_shards(nodeids, planning_durations(state.history.runs), state.count)
    if state.plan_only:
        return  # keep the items: pytest_runtestloop prints the plan instead of running them
    mine = set(state.plan.shards[state.index - 1].tests)
    keep = [item for item in items if item.nodeid in mine]
    drop = [item for item in items if item.nodeid not in mine]
    if drop:
        config.hook.pytest_deselected(items=drop)
    items[:] = keep


def pytest_report_collectionfinish(config: pytest.Config, items: list[pytest.Item]) -> list[str]:
    state = config.stash.get(_STATE, None)
    if state is None or state.history is None or state.plan is None:
        return []
    history = state.history
    shard_runs = sum(1 for r in history.runs if r.shard is not None)
    lines = [
        f"shard history: {len(history.runs) - shard_runs} run(s) in {history.directory}"
        + (f" ({shard_runs} shard run(s) not used for balancing)" if shard_runs else "")
    ]
    lines += [f"shard history warning: {w}" for w in history.warnings]
    if not state.plan_only:
        shard = state.plan.shards[state.index - 1]
        lines.append(
            f"shard {state.index}/{state.count}: {len(shard.tests)} of {state.selected} selected tests, "
            f"expected {shard.expected_seconds:.1f} s (slowest shard {state.plan.slowest_seconds:.1f} s, "
            f"ideal {state.plan.ideal_seconds:.1f} s)"
        )
    return lines


@pytest.hookimpl(tryfirst=True)
def pytest_runtestloop(session: pytest.Session) -> bool | None:
    state = session.config.stash.get(_STATE, None)
    if state is None or not state.plan_only or state.plan is None:
        return None
    if session.testsfailed:
        return None  # collection errors: let pytest report and stop as usual
    from testharness.shard_plan import format_plan

    lines = format_plan(state.plan, highlight=state.index)
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    for line in lines:
        if reporter is not None:
            reporter.write_line(line)
        else:
            print(line)
    return True  # handled: no test runs


@pytest.hookimpl(tryfirst=True)  # before the tracker records the exit status
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    state = session.config.stash.get(_STATE, None)
    # More shards than tests leaves some shards empty: that shard did its job (exit 0).
    # Zero tests selected before sharding is still "no tests collected" (exit 5).
    if (
        state is not None
        and not state.plan_only
        and state.selected > 0
        and exitstatus == pytest.ExitCode.NO_TESTS_COLLECTED
    ):
        session.exitstatus = pytest.ExitCode.OK
