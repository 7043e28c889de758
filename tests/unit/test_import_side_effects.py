"""Importing the library changes nothing in the process: no environment variable set, changed
or removed, also when coverage measures the process (where the library once handed coverage to
child processes through the environment). What a run needs is set by its entry point
(examples/_cli.py) or given to the Ray job it starts (ray_cluster.job_runtime_env).

The packages the library imports come first: what they do on import is theirs (`import ray`
sets RAY_CLIENT_MODE=0)."""

from __future__ import annotations

import ast
import json
import os
import pkgutil
import subprocess
import sys
from pathlib import Path

import pytest

import nemo_rl

ROOT = Path(__file__).resolve().parents[2]

# Imports the packages the library imports (argv[1], comma-separated; those not installed are
# skipped), then every module of the library, and prints what the environment lost, gained or changed.
IMPORT_ALL = """
import importlib, json, os, sys
for name in sys.argv[1].split(","):
    try:
        importlib.import_module(name)
    except ImportError:
        pass
before = dict(os.environ)
for name in sys.argv[2:]:
    importlib.import_module(name)
after = dict(os.environ)
print("DIFF " + json.dumps({k: [before.get(k), after.get(k)] for k in before.keys() | after.keys()
                            if before.get(k) != after.get(k)}))
"""


def _modules() -> list[str]:
    return ["nemo_rl", *sorted(m.name for m in pkgutil.walk_packages(nemo_rl.__path__, "nemo_rl."))]


def _dependencies() -> list[str]:
    """The top-level packages outside the standard library that the library's code imports."""
    found: set[str] = set()
    for path in Path(nemo_rl.__file__).parent.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                found.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                found.add(node.module.split(".")[0])
    return sorted(found - set(sys.stdlib_module_names) - {"nemo_rl", "__future__"})


def _env() -> dict[str, str]:
    """This environment without what this session set for its own children (coverage's hand-off
    under `--cov`, the conftest's Ray switch): a user's shell has neither."""
    return {
        k: v for k, v in os.environ.items() if not k.startswith("COVERAGE_") and k != "RAY_ENABLE_UV_RUN_RUNTIME_ENV"
    }


@pytest.mark.parametrize("measured", [False, True], ids=["plain", "under-coverage"])
def test_importing_every_module_leaves_the_environment_unchanged(measured: bool, tmp_path: Path) -> None:
    script = tmp_path / "import_all.py"
    script.write_text(IMPORT_ALL)
    python = [sys.executable]
    if measured:  # the project's coverage settings, as `coverage run` / `pytest --cov` use them
        python += ["-m", "coverage", "run", f"--rcfile={ROOT / 'pyproject.toml'}", f"--data-file={tmp_path / 'cov'}"]
    modules = _modules()
    assert {"nemo_rl.distributed.ray_cluster", "nemo_rl.models.policy.workers.dtensor_policy_worker"} <= set(modules)
    done = subprocess.run(
        [*python, str(script), ",".join(_dependencies()), *modules],
        cwd=ROOT,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith("DIFF ")]
    assert done.returncode == 0 and lines, done.stderr[-3000:]
    assert json.loads(lines[0].removeprefix("DIFF ")) == {}
    assert not measured or (tmp_path / "cov").exists()  # it was measured


def test_the_library_uses_no_private_ray_api() -> None:
    """Ray's private modules change between releases: the harness's real_ray package is the one place
    that may use them (for the test side's needs), never the library."""
    private = ("ray._private", "ray._raylet", "ray.core.generated", "ray.util.client")
    users = sorted(
        str(path.relative_to(ROOT))
        for path in Path(nemo_rl.__file__).parent.rglob("*.py")
        if any(name in path.read_text() for name in private)
    )
    assert users == []
