"""The harness's pytest entry point: it only gathers the feature plugins.

Each feature is one module with its own hooks (as in pytest's `_pytest/`); loading this
module (root conftest.py, or `-p testharness.plugin`) loads them all.
"""

pytest_plugins = [
    "testharness.interrupts",
    "testharness.selection",
    "testharness.tracker",
    "testharness.sharding",
    "testharness.remote_select.plugin",
    "testharness.testmon_data",
]
