"""The harness's own tests drive inner pytest runs with the `pytester` fixture.

`pytest_plugins` is only allowed in the root conftest, so the pytester plugin is loaded
here, when this conftest is registered (pytest_configure is a historic hook: it runs for
late conftests too, and pytester's options are then added with their defaults).
"""

import pytest


def pytest_configure(config: pytest.Config) -> None:
    if not config.pluginmanager.has_plugin("pytester"):
        config.pluginmanager.import_plugin("pytester")


@pytest.fixture(autouse=True)
def _inner_runs_outside_the_outer_coverage(monkeypatch: pytest.MonkeyPatch) -> None:
    """Inner runs start as a user's would: not measured for the outer run's `--cov`.

    Coverage's `patch = ["subprocess"]` (pyproject.toml) hands its configuration to every
    Python subprocess, so each inner pytest, Ray worker and script of these tests would
    start coverage of `nemo_rl`, which none of them runs: +0.3 s of CPU per process and a
    data file each. A test about coverage passes its own `--cov` to the inner run.
    """
    for name in ("COVERAGE_PROCESS_CONFIG", "COVERAGE_PROCESS_START"):
        monkeypatch.delenv(name, raising=False)


# The Ray cluster that the `-n` tests' runs join (test_parallel*.py).
from xdist_project import shared_head  # noqa: E402, F401
