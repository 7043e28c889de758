"""The small project of the remote-selection scenarios (test_remote_select_plugin.py,
test_remote_select_state.py, test_remote_select_reach_record.py;
test_remote_select_relative_import.py shares pieces): its settings and a driver for inner
`pytest --testmon` runs in a subprocess, so that testmon's coverage never nests in the outer
run's."""

from __future__ import annotations

import os
import re
import sys
import textwrap
from pathlib import Path

import pytest

PLUGIN = "testharness.remote_select.plugin"

MAP_FILE, STATE_FILE = ".sel_map.json", ".sel_state.json"  # [tool.testharness] remote_*_file below
PYPROJECT = f"""
[tool.testharness]
source_packages = ["mylib"]
test_roots = ["tests"]
remote_map_file = "{MAP_FILE}"
remote_state_file = "{STATE_FILE}"

[tool.pytest.ini_options]
testpaths = ["tests"]
"""

# A project's tests/conftest.py whose tests share one small Ray cluster of their own.
RAY_SESSION_CONFTEST = """
    import pytest


    @pytest.fixture(scope="session")
    def ray_session():
        import ray

        ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False)
        yield
        ray.shutdown()
"""

_LINE = re.compile(r"^(tests/\S+::\S+) (PASSED|FAILED|ERROR|SKIPPED)")


class Project:
    def __init__(self, path: Path, pytester: pytest.Pytester):
        self.path = path
        self.pytester = pytester

    def write(self, rel: str, text: str) -> None:
        target = self.path / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(textwrap.dedent(text).lstrip("\n"))

    def edit(self, rel: str, old: str, new: str) -> None:
        target = self.path / rel
        text = target.read_text()
        assert old in text, (rel, old)
        target.write_text(text.replace(old, new))

    def run(self, *args: str, plugin: bool = True, cwd: Path | None = None) -> tuple[pytest.RunResult, dict[str, str]]:
        """Run pytest --testmon in a subprocess; return the result and {nodeid: outcome}."""
        # The harness's entry point loads the plugin anyway: `-p no:` is testmon alone.
        cmd = [sys.executable, "-m", "pytest", "--testmon", "-v", "-p", PLUGIN if plugin else f"no:{PLUGIN}"]
        old = os.getcwd()
        os.chdir(cwd or self.path)
        try:
            result = self.pytester.run(*cmd, *args, timeout=120)
        finally:
            os.chdir(old)
        ran = {}
        for line in result.outlines:
            m = _LINE.match(line)
            if m:
                ran[m.group(1)] = m.group(2)
        return result, ran

    def header(self, result: pytest.RunResult) -> list[str]:
        return [line for line in result.outlines if line.startswith("remote-select")]
