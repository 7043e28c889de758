"""The small project of the results-record tests (test_records.py, test_records_exit_status.py):
a pyproject with the harness's settings, an environment for its runs, and its results file."""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from pathlib import Path
from typing import Any

RUN_UNIT = Path(__file__).resolve().parents[3] / "tests" / "run_unit.sh"  # this repository's

PYPROJECT = """
[tool.testharness]
results_dir = "out"
test_roots = ["tests"]

[tool.pytest.ini_options]
testpaths = ["tests"]
"""


def write_project(root: Path, files: dict[str, str]) -> Path:
    (root / "pyproject.toml").write_text(PYPROJECT)
    (root / "conftest.py").write_text('pytest_plugins = ["testharness.plugin"]\n')
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def run_env(root: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "TESTHARNESS_", "RAY_ADDRESS"))}
    env["STARTED_FILE"] = str(root / "started")
    # Our own Ray session dir (short: Ray's socket paths must fit 107 bytes).
    env["RAY_TMPDIR"] = tempfile.mkdtemp(prefix="rec_ray_", dir="/tmp")
    env["RAY_ENABLE_UV_RUN_RUNTIME_ENV"] = "0"  # Ray workers run this interpreter, not a uv-built copy
    env["TESTHARNESS_ROOT"] = str(root)
    env["TESTHARNESS_NO_DISCOVERY"] = "1"
    return env


def joining(head: Any) -> dict[str, str]:
    """The variables (for run_unit_sh) of a run whose -n workers join `head`, the module's
    cluster (xdist_project.shared_head), instead of starting and stopping one of their own:
    for the tests that look at something else than Ray's start (~6 CPU-s a start)."""
    return {"RAY_ADDRESS": head.address, "RAY_AUTH_MODE": "token", "RAY_TMPDIR": head.ray_tmpdir}


def joining_under_xdist(request: Any, args: list[str]) -> dict[str, str]:
    """`joining` the module's cluster when `args` run xdist workers (`-n`), else nothing: for the
    tests whose -n variant checks something else than the start of a cluster."""
    return joining(request.getfixturevalue("shared_head")) if "-n" in args else {}


def read_results(root: Path) -> dict[str, Any]:
    return json.loads((root / "out" / "unit_results.json").read_text())


def run_unit_sh(root: Path, *args: str, timeout: float = 240, **env: str) -> subprocess.CompletedProcess[str]:
    """tests/run_unit.sh on the project at `root`, as a user runs it (its supervisor included)."""
    return subprocess.run(
        ["bash", str(RUN_UNIT), "-p", "no:randomly", "-p", "no:cacheprovider", *args],
        cwd=root, env={**run_env(root), **env}, capture_output=True, text=True, timeout=timeout,
    )  # fmt: skip
