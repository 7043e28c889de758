"""The fake project of the remote-aware selection scenarios, and its seeded copy.

The fake project has a module (`mylib/worker_impl.py`) whose code only runs in a
subprocess, the way a `@ray.remote` actor's code runs in a Ray worker: testmon's in-process
coverage cannot see it, so an edit there must be caught by the import graph. Shared by
test_remote_select_plugin.py (selection) and test_remote_select_state.py (its records),
two files so that under -n they run on two workers.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from selection_project import MAP_FILE, PYPROJECT, STATE_FILE, Project

FILES = {
    "mylib/__init__.py": "",
    # Runs only in a child process (the stand-in for a Ray worker).
    "mylib/worker_impl.py": """
        def compute(x):
            return x * 2


        if __name__ == "__main__":
            import sys
            print(compute(int(sys.argv[1])))
    """,
    # The driver side: imports the worker module and starts it "remotely".
    "mylib/actors.py": """
        import subprocess
        import sys

        from . import worker_impl  # noqa: F401  (relative import of the actor module)


        def run_remote(x):
            out = subprocess.run(
                [sys.executable, "-m", "mylib.worker_impl", str(x)],
                capture_output=True, text=True, check=True,
            )
            return int(out.stdout)
    """,
    "mylib/local.py": """
        def add(a, b):
            return a + b
    """,
    # A sub-package reached through `from mylib import sub`, whose __init__ re-exports.
    "mylib/sub/__init__.py": "from .helpers import helper\n",
    "mylib/sub/helpers.py": """
        def helper():
            return "h"
    """,
    # An actor class only ever named by a dotted string (no import statement).
    "mylib/strmod.py": """
        class Actor:
            def value(self):
                return 41
    """,
    "mylib/launcher.py": """
        import subprocess
        import sys

        ACTOR = "mylib.strmod.Actor"


        def launch():
            mod, cls = ACTOR.rsplit(".", 1)
            code = f"import importlib; print(getattr(importlib.import_module('{mod}'), '{cls}')().value())"
            out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
            return int(out.stdout)
    """,
    "tests/conftest.py": """
        import os

        import pytest


        @pytest.fixture(scope="session")
        def cluster():
            # Stand-in for the session-scoped Ray fixture: leaves a trace when started.
            with open("CLUSTER_STARTED", "a") as fh:
                fh.write("x")
            yield
    """,
    "tests/test_remote.py": """
        import os

        from mylib.actors import run_remote


        def test_remote_a(cluster):
            assert run_remote(3) == 6


        def test_remote_b(cluster):
            if os.path.exists("INTERRUPT"):
                raise KeyboardInterrupt
            assert run_remote(4) == 8


        def test_remote_c(cluster):
            assert run_remote(5) == 10
    """,
    "tests/test_local.py": """
        import pytest

        from mylib.local import add


        @pytest.mark.parametrize("a", [1, 2])
        def test_add(a):
            assert add(a, 1) == a + 1
    """,
    "tests/test_pkg.py": """
        from mylib import sub


        def test_helper():
            assert sub.helper() == "h"
    """,
    "tests/test_string.py": """
        from mylib.launcher import launch


        def test_launch():
            assert launch() == 41
    """,
}

REMOTE = {
    "tests/test_remote.py::test_remote_a",
    "tests/test_remote.py::test_remote_b",
    "tests/test_remote.py::test_remote_c",
}
ALL = REMOTE | {
    "tests/test_local.py::test_add[1]",
    "tests/test_local.py::test_add[2]",
    "tests/test_pkg.py::test_helper",
    "tests/test_string.py::test_launch",
}


@pytest.fixture
def project(pytester: pytest.Pytester) -> Project:
    # Run the inner pytest with this environment's testharness, whatever the cwd.
    pytester.makefile(".toml", pyproject=PYPROJECT)
    proj = Project(pytester.path, pytester)
    for rel, text in FILES.items():
        proj.write(rel, text)
    return proj


@pytest.fixture(scope="module")
def seed_copy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where the first `seeded` project of this module is kept for the others."""
    return tmp_path_factory.mktemp("seed") / "project"


@pytest.fixture
def seeded(project: Project, seed_copy: Path) -> Project:
    """A project after a first full, green run (the seed).

    The seed is run once per module; the other tests start from a copy of it, which is a
    moved checkout with its timestamps kept (that a moved checkout runs nothing is a test
    below). Saves one inner pytest per test.
    """
    if seed_copy.is_dir():
        shutil.copytree(seed_copy, project.path, dirs_exist_ok=True)
        return project
    result, ran = project.run()
    assert set(ran) == ALL and set(ran.values()) == {"PASSED"}, result.stdout.str()
    assert (project.path / STATE_FILE).is_file()
    assert (project.path / MAP_FILE).is_file()
    shutil.copytree(project.path, seed_copy)
    return project
