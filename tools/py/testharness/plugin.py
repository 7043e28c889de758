"""The harness's pytest entry point: it only gathers the feature plugins.

Each feature is one module with its own hooks (as in pytest's `_pytest/`). Installing the
package loads this module in every pytest run through the `pytest11` entry point named
`testharness.plugin`; where it is not installed (a checkout on PYTHONPATH), `-p
testharness.plugin` loads the same thing, and never twice: both register it under that name.
Markers and options come from the feature modules (selection.py registers the marker
groups of `[tool.testharness]` and `run_first`/`num_gpus`), so a project run with
`--strict-markers` declares none of them.
"""

import pytest

from testharness import hookspecs

pytest_plugins = [
    "testharness.interrupts",
    "testharness.selection",
    "testharness.tracker",  # with testharness.recorder
    "testharness.sharding",
    "testharness.parallel",  # the controller's and the workers' (its package lists both)
    "testharness.remote_select.plugin",
    "testharness.testmon_data",
    "testharness.hygiene.plugin",
    "testharness.supervised",
    "testharness.bytecode",
]


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    """The hooks the feature plugins ask of each other (hookspecs.py)."""
    pluginmanager.add_hookspecs(hookspecs)
