"""Inner runs of the harness's tests load the harness's plugins and none foreign to it."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from inner_plugins import blocking_addopts, foreign_plugins, installed_plugins

HARNESS_PLUGINS = ("pytest-testmon", "pytest-xdist", "pytest-rerunfailures", "testharness")


def test_plugins_of_distributions_outside_the_harness_are_foreign() -> None:
    installed = [
        ("xdist", "pytest-xdist"),
        ("pytest-testmon", "pytest_testmon"),  # distribution names compare normalized
        ("testharness.plugin", "testharness"),
        ("hypothesispytest", "hypothesis"),
        ("anyio", "anyio"),
    ]
    assert foreign_plugins(installed) == ["anyio", "hypothesispytest"]
    assert blocking_addopts(["anyio"], " -x ") == "-x -p no:anyio"


def _registered(result: pytest.RunResult) -> str:
    """The third-party plugins an inner `--trace-config` run registered."""
    return result.stdout.str().split("registered third-party plugins:")[1].split("active plugins:")[0]


def _fake_distribution(site: Path) -> None:
    """A distribution with a pytest11 entry point, installed nowhere but on `site`."""
    (site / "foreignplug.py").write_text("def pytest_report_header(config):\n    return 'foreign plugin loaded'\n")
    info = site / "foreignplug-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: foreignplug\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[pytest11]\nforeign = foreignplug\n")


def test_an_inner_run_blocks_a_foreign_plugin_and_keeps_the_harness_plugins(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    site = tmp_path / "site"
    site.mkdir()
    _fake_distribution(site)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")])))
    pytester.makepyfile(test_one="def test_one():\n    pass\n")
    assert installed_plugins([str(site)]) == [("foreign", "foreignplug")]

    loaded = pytester.runpytest_subprocess("--trace-config")  # the fake plugin is found: the check bites
    assert "foreign plugin loaded" in loaded.stdout.str()

    blocks = foreign_plugins(installed_plugins([str(site), *sys.path]))
    assert "foreign" in blocks
    monkeypatch.setenv("PYTEST_ADDOPTS", blocking_addopts(blocks))
    result = pytester.runpytest_subprocess("--trace-config")
    result.assert_outcomes(passed=1)
    assert "foreign plugin loaded" not in result.stdout.str()
    registered = _registered(result)
    for name in HARNESS_PLUGINS:
        assert name in registered


def test_pytester_runs_of_this_suite_block_the_foreign_plugins_installed_here(pytester: pytest.Pytester) -> None:
    """The conftest's blocks survive pytester's own clean-up of PYTEST_ADDOPTS."""
    from conftest import FOREIGN_PLUGINS

    if not FOREIGN_PLUGINS:
        pytest.skip("no pytest plugin foreign to the harness is installed here")
    pytester.makepyfile(test_one="def test_one():\n    pass\n")
    result = pytester.runpytest_subprocess("--trace-config")
    result.assert_outcomes(passed=1)
    registered = _registered(result)
    foreign_dists = {dist for name, dist in installed_plugins() if name in FOREIGN_PLUGINS}
    assert foreign_dists and not [d for d in foreign_dists if f"  {d}-" in registered], registered
    assert "pytest-testmon-" in registered
