"""docs/harness-map.md's hook-order table is the order pluggy really calls the harness's hooks
in: read from `config.hook.<name>.get_hookimpls()` of real sessions (serial with testmon, and
the controller and a worker of a `-n 2` run), compared with the table row by row.

A hook is listed when one of the harness's implementations of it is ordered (tryfirst,
trylast, a wrapper) or when the harness implements it more than once (the order among equals
is registration order). Each row names the implementations in call order (pluggy calls the
list `get_hookimpls()` returns from its end), by module under `testharness.` (`:Class` for a
per-config plugin object's method) and its marks; every process role's order must be the
table's order of the implementations that role has.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
from records_project import PYPROJECT

from testharness.crash_record import SUPERVISE_DIR_ENV, SUPERVISOR_PID_ENV

HARNESS_MAP = Path(__file__).resolve().parents[3] / "docs" / "harness-map.md"
BEGIN, END = "<!-- hook-order: begin -->", "<!-- hook-order: end -->"

# Dumps, at the start of the session's end (every plugin registered by then), each ordered
# hook's implementations of the harness in call order, per process role.
DUMPER = r"""
import json, os, sys
from pathlib import Path

import pytest

sys.modules["ray"] = None  # as where Ray is not installed: -n runs with no shared cluster

MARKS = ("tryfirst", "trylast", "wrapper")


def _label(impl):
    function = impl.function
    module = function.__module__.removeprefix("testharness.")
    owner = function.__qualname__.rpartition(".")[0]
    marks = [m for m in MARKS if getattr(impl, m, False) or (m == "wrapper" and impl.hookwrapper)]
    return [module + (":" + owner if owner else ""), marks]


def _harness_order(config):
    order = {}
    for name in dir(config.hook):
        caller = getattr(config.hook, name)
        if not hasattr(caller, "get_hookimpls"):
            continue
        ours = [impl for impl in reversed(caller.get_hookimpls())
                if impl.function.__module__.startswith("testharness.")]
        if len(ours) > 1 or any(_label(impl)[1] for impl in ours):
            order[name] = [_label(impl) for impl in ours]
    return order


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_sessionfinish(session):
    config = session.config
    role = ("worker" if hasattr(config, "workerinput")
            else "controller" if getattr(config.option, "numprocesses", None) else "serial")
    Path(os.environ["HOOK_ORDER_DIR"], role + ".json").write_text(json.dumps(_harness_order(config)))
    return (yield)
"""


def real_orders(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> dict[str, dict[str, list]]:
    pytester.makepyprojecttoml(PYPROJECT)
    pytester.makeconftest(DUMPER)
    pytester.makepyfile(
        **{"tests/test_a.py": "def test_a():\n    pass\n", "tests/test_b.py": "def test_b():\n    pass\n"}
    )
    out = pytester.mkdir("orders")
    monkeypatch.setenv("HOOK_ORDER_DIR", str(out))
    # As under tests/run_unit.sh: its supervisor's plugin (supervised.py) registers too (this
    # process starts the inner pytest: the supervisor it is bound to, testharness.run_binding).
    monkeypatch.setenv(SUPERVISOR_PID_ENV, str(os.getpid()))
    monkeypatch.setenv(SUPERVISE_DIR_ENV, str(pytester.mkdir("supervised_serial")))
    serial = pytester.runpytest_subprocess("-p", "testharness.plugin", "--testmon")
    assert serial.ret == 0, serial.stdout.str()
    monkeypatch.setenv(SUPERVISE_DIR_ENV, str(pytester.mkdir("supervised_parallel")))
    parallel = pytester.runpytest_subprocess("-p", "testharness.plugin", "-n", "2", "-p", "no:testmon")
    assert parallel.ret == 0, parallel.stdout.str()
    return {role: json.loads((out / f"{role}.json").read_text()) for role in ("serial", "controller", "worker")}


ENTRY = re.compile(r"`(?P<label>[^`]+)`(?: \((?P<marks>[a-z ]+)\))?")


def documented_order(text: str) -> dict[str, list[list]]:
    """The table between the markers: hook -> [[label, [marks]], ...] in call order."""
    table = text.split(BEGIN, 1)[1].split(END, 1)[0]
    order = {}
    for line in table.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 2 or not cells[0].startswith("`pytest_"):
            continue
        entries = [ENTRY.fullmatch(e.strip()) for e in cells[1].split("→")]
        assert all(entries), f"unreadable row: {line}"
        order[cells[0].strip("`")] = [[m["label"], (m["marks"] or "").split()] for m in entries if m is not None]
    return order


def mismatches(documented: dict[str, list[list]], real: dict[str, dict[str, list]]) -> list[str]:
    """What differs: a hook missing on either side, or a role whose order is not the table's
    order of the implementations that role has."""
    problems = []
    hooks = set().union(*(set(r) for r in real.values()))
    for hook in sorted(hooks - set(documented)):
        problems.append(f"{hook}: ordered in the code, missing from the table")
    for hook in sorted(set(documented) - hooks):
        problems.append(f"{hook}: in the table, not ordered in any role")
    for hook in sorted(hooks & set(documented)):
        table = documented[hook]
        for role, orders in real.items():
            actual = orders.get(hook, [])
            present = [entry for entry in table if entry in actual]
            if present != actual:
                problems.append(f"{hook} ({role}): the code calls {actual}, the table says {present}")
        seen = [entry for orders in real.values() for entry in orders.get(hook, [])]
        for entry in table:
            if entry not in seen:
                problems.append(f"{hook}: the table's {entry} is not an implementation in any role")
    return problems


def merged_rows(real: dict[str, dict[str, list]]) -> str:
    """The order column every role agrees with, one row per hook: what the table should say
    (printed when it does not; the "why" is the writer's)."""
    rows = []
    for hook in sorted(set().union(*(set(r) for r in real.values()))):
        order: list[list] = []
        for calls in sorted((r[hook] for r in real.values() if hook in r), key=len, reverse=True):
            for i, entry in enumerate(calls):
                if entry not in order:
                    before = [e for e in calls[:i] if e in order]
                    order.insert(order.index(before[-1]) + 1 if before else 0, entry)
        cells = " → ".join(f"`{label}`" + (f" ({' '.join(marks)})" if marks else "") for label, marks in order)
        rows.append(f"| `{hook}` | {cells} |")
    return "\n".join(rows)


def test_the_table_is_the_order_pluggy_calls(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    real = real_orders(pytester, monkeypatch)
    assert real["worker"] and real["controller"] and real["serial"]
    problems = mismatches(documented_order(HARNESS_MAP.read_text(encoding="utf-8")), real)
    assert problems == [], "\n".join([*problems, "the rows the code calls for:", merged_rows(real)])


def test_a_tryfirst_added_or_removed_is_a_mismatch() -> None:
    documented = {"pytest_x": [["a", ["tryfirst"]], ["b", []]]}
    assert mismatches(documented, {"serial": {"pytest_x": [["a", ["tryfirst"]], ["b", []]]}}) == []
    assert mismatches(documented, {"serial": {"pytest_x": [["a", []], ["b", []]]}})  # removed
    assert mismatches(documented, {"serial": {"pytest_x": [["b", ["tryfirst"]], ["a", ["tryfirst"]]]}})  # added
    assert mismatches(documented, {"serial": {"pytest_x": [["b", []], ["a", ["tryfirst"]]]}})  # reordered
    assert mismatches(documented, {"serial": {"pytest_y": [["a", ["trylast"]]]}})  # a new ordered hook
