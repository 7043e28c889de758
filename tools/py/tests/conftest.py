"""The harness package's own suite (`uv run --group test pytest tools/py/tests`, config in
tools/py/pyproject.toml). Its tests drive inner pytest runs with the `pytester` fixture.

`pytest_plugins` is only allowed in the root conftest, so the pytester plugin is loaded
here, when this conftest is registered (pytest_configure is a historic hook: it runs for
late conftests too, and pytester's options are then added with their defaults). Its
`sys.modules` restore is replaced by one without a gap that importing threads can fall into
(pytester_modules.py).
"""

import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from inner_plugins import blocking_addopts, foreign_plugins, installed_plugins
from pytester_modules import install as install_gapless_modules_restore

FOREIGN_PLUGINS = foreign_plugins(installed_plugins())

# Every Ray cluster these tests start, here or in an inner run: workers at normal priority
# (Ray renices them to 15: beside a busy process an actor gets ~3% of a core), this
# interpreter and environment as they are (under `uv run`, Ray would otherwise build a uv
# environment per job), and no idle worker prestarted per CPU.
os.environ.setdefault("RAY_worker_niceness", "0")
os.environ.setdefault("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")
os.environ.setdefault("RAY_prestart_worker_first_driver", "0")


def pytest_configure(config: pytest.Config) -> None:
    if not config.pluginmanager.has_plugin("pytester"):
        config.pluginmanager.import_plugin("pytester")
    install_gapless_modules_restore()
    if sys.dont_write_bytecode and not hasattr(config, "workerinput"):
        _cache_the_harness_rewritten()


IMPORT_THE_WHOLE_HARNESS = """
import importlib, pkgutil
import testharness

for module in pkgutil.walk_packages(testharness.__path__, "testharness."):
    if not module.name.endswith(".__main__"):
        importlib.import_module(module.name)
"""


def _cache_the_harness_rewritten() -> None:
    """pytest rewrites the asserts of every module of a pytest11 plugin's package, the whole
    harness, when a pytest starts, and keeps the result only where Python may write bytecode
    (`__pycache__/*-pytest-X.pyc`). Where PYTHONDONTWRITEBYTECODE is set (CI and its images)
    every inner pytest of this suite (~300) rewrote it again: ~0.7 of its ~1.5 CPU-s of
    start-up. One pytest that may write, once per run (not per -n worker), leaves the cache
    that the others read (checked against the sources' mtime and size, as any .pyc). Its
    conftest imports every module of the harness: a feature's machinery is imported only by a
    run that uses it (--testmon's engine, -n's scheduler), and is then read from the cache too."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE" and not k.startswith("TESTHARNESS_")}
    with tempfile.TemporaryDirectory() as empty:  # nothing to collect, no configuration
        Path(empty, "conftest.py").write_text(IMPORT_THE_WHOLE_HARNESS)
        subprocess.run([sys.executable, "-m", "pytest", "--co", "-q", "-p", "no:cacheprovider"], cwd=empty, env=env,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=300, check=False)  # fmt: skip


@pytest.fixture(autouse=True)
def _inner_runs_start_clean(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """Inner runs start as a user's would, not as part of this run.

    - The harness's variables that a user or a benchmark set for this run (results and history
      directory, GPU count) would make every inner run write its records into this run's
      history and read this run's durations. (run_unit's own variables, the supervise
      directory, summary file and supervisor pid, no longer need this: a pytest takes them only
      where its parent chain binds it to the supervisor, testharness.run_binding; but this suite
      runs as a plain pytest, whose variables are a user's and pass on to inner runs.)
    - Coverage's `patch = ["subprocess"]` (pyproject.toml) hands its configuration to every
      Python subprocess, so each inner pytest, Ray worker and script would start coverage of
      `nemo_rl`, which none of them runs: +0.3 s of CPU per process and a data file each.
    - pytest plugins installed beside the harness but foreign to it are blocked (`-p no:NAME`
      in PYTEST_ADDOPTS, see inner_plugins.py): they cost ~1 s per inner pytest on a shared
      GPU machine's environment and are no part of what these tests check. `pytester`
      clears PYTEST_ADDOPTS when it is set up, so it is set up first here.
    A test that needs one of these passes it to its inner run itself.
    """
    for name in list(os.environ):
        if name.startswith("TESTHARNESS_") or name in ("COVERAGE_PROCESS_CONFIG", "COVERAGE_PROCESS_START"):
            monkeypatch.delenv(name)
    if "pytester" in request.fixturenames:
        request.getfixturevalue("pytester")
    if FOREIGN_PLUGINS:
        monkeypatch.setenv("PYTEST_ADDOPTS", blocking_addopts(FOREIGN_PLUGINS, os.environ.get("PYTEST_ADDOPTS", "")))


@pytest.fixture(scope="session")
def ray_cluster() -> Iterator[Any]:
    """One Ray cluster for the tests that call Ray in this process (joined when one is running)."""
    import ray

    started = not ray.is_initialized()
    if started and os.environ.get("RAY_ADDRESS"):  # the cluster of this run's -n workers
        ray.init(log_to_driver=False)
    elif started:
        ray.init(num_cpus=max(os.cpu_count() or 1, 4), include_dashboard=False, log_to_driver=False)
    yield ray
    if started:
        ray.shutdown()


# The Ray cluster that the `-n` tests' runs join (test_parallel*.py).
# The seeded project of the remote-aware selection scenarios (test_remote_select_plugin.py and
# test_remote_select_state.py: two files, so that under -n two workers share them).
from remote_select_seeded import project, seed_copy, seeded  # noqa: E402, F401
from xdist_project import shared_head  # noqa: E402, F401
