"""What loading the plugin costs a pytest that does not use a feature (issue 60): the feature
modules keep their hooks, and the machinery only an active feature needs is imported when that
feature turns on. Checked as what a process loads, not as a timing (bench/pytest_start_cost.py
measures the time)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

# Imported only where a run uses what they serve (each module's import says which).
DEFERRED_CORES = (
    "testharness.gpu_lease",  # a -n worker's uses_cuda test
    "testharness.hygiene.hang",  # a test that hangs
    "testharness.remote_select.engine",  # --testmon: the import graph, the stores
    "testharness.remote_select.reach",  # --testmon: Ray's patches
    "testharness.shard_plan",  # --shard, -n's file order
    "testharness.state_files",  # --testmon
    "testharness.xdist_schedule",  # -n's controller
)
# Modules of the standard library and beyond that the plugin's own imports no longer bring.
DEFERRED_OTHERS = ("concurrent.futures", "ctypes", "pickle", "psutil", "sqlite3", "statistics")

# The plugin as pytest loads it: the module of the entry point, then every module named in a
# loaded module's `pytest_plugins`; printed is what that added to what `import pytest` loaded.
LOAD_AS_PYTEST_DOES = """
import importlib, json, sys
import pytest
before = set(sys.modules)
def load(name):
    for sub in getattr(importlib.import_module(name), "pytest_plugins", ()):
        load(sub)
load("testharness.plugin")
print(json.dumps(sorted(set(sys.modules) - before)))
"""


def test_loading_the_plugin_imports_no_machinery_of_a_feature_the_run_may_not_use() -> None:
    out = subprocess.run([sys.executable, "-c", LOAD_AS_PYTEST_DOES], capture_output=True, text=True, check=True)
    loaded = set(json.loads(out.stdout))
    assert {"testharness.hygiene.plugin", "testharness.parallel.worker", "testharness.recorder"} <= loaded  # the walk
    assert sorted(loaded & {*DEFERRED_CORES, *DEFERRED_OTHERS}) == []


def test_a_plain_run_of_a_configured_project_never_imports_them(pytester: pytest.Pytester) -> None:
    # One passing test, with the features a plain run has on (results, leak check, watchdog).
    pytester.makepyprojecttoml('[tool.testharness]\nresults_dir = "out"\ntest_roots = ["tests"]\n')
    pytester.makeconftest("""
        import json, sys
        import pytest

        @pytest.hookimpl(trylast=True)
        def pytest_unconfigure(config):
            with open("modules.json", "w") as fh:
                json.dump(sorted(sys.modules), fh)
    """)
    pytester.mkdir("tests").joinpath("test_one.py").write_text("def test_one(tracker):\n    tracker.track('x', 1)\n")
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    assert (pytester.path / "out" / "unit_results.json").is_file()
    loaded = set(json.loads(Path(pytester.path, "modules.json").read_text()))
    assert "testharness.hygiene.watchdog" in loaded  # the run's own features did load
    assert sorted(loaded & set(DEFERRED_CORES)) == []
