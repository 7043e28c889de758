"""The harness as another project gets it: `pip install tools/py` into a fresh venv, then
pytest on a throwaway Ray project outside this repository, configured only through its
`[tool.testharness]` table (issue 19's "done when").

One venv and one project for the whole module (building them is the slow part); the runs
go in order, as a user would type them: default selection and the tracker, a marker group
of the project's own, shards, `--testmon` before and after an edit made only inside a Ray
actor, and `testharness report`. Packages come from uv's cache (pinned to this venv's
versions, so nothing new is downloaded once the repository's own venv exists).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from importlib.metadata import version
from pathlib import Path

import pytest

TOOLS_PY = Path(__file__).resolve().parents[3] / "tools" / "py"
UV = shutil.which("uv")

PYPROJECT = """
[tool.testharness]
source_packages = ["toypkg"]
test_roots = ["tests"]
results_dir = "results"
remote_map_file = ".toy_remote_map.json"
remote_state_file = ".toy_remote_state.json"

[tool.testharness.marker_groups.network]
option = "--with-network"
description = "needs the network"

[tool.testharness.marker_groups.quantum]
option = "--quantum-only"
mode = "only"
requires = ["no_such_quantum_sdk"]
requires_name = "the quantum SDK"
hint = "pip install toy[quantum]"
"""

ACTOR = """
import ray


@ray.remote(num_cpus=0)
class Adder:
    def add(self, x: int) -> int:
        return x + 1
"""

PLAIN = """
def double(x: int) -> int:
    return 2 * x
"""

TESTS = {
    "test_actor.py": """
        import ray
        from toypkg.actor import Adder


        def test_actor_adds():
            ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False)
            try:
                assert ray.get(Adder.remote().add.remote(1)) >= 2
            finally:
                ray.shutdown()
    """,
    "test_plain.py": """
        from toypkg.plain import double


        def test_double(tracker):
            tracker.track("doubled", double(21))
            assert double(21) == 42


        def test_double_zero():
            assert double(0) == 0
    """,
    "test_groups.py": """
        import pytest


        @pytest.mark.network
        def test_needs_network():
            pass


        @pytest.mark.quantum
        def test_quantum():
            pass


        @pytest.mark.run_first
        def test_first():
            pass
    """,
}


class Project:
    """The throwaway project and the venv that has the harness installed."""

    def __init__(self, path: Path, python: Path) -> None:
        self.path, self.python = path, python

    def run(self, *args: str, expect: int = 0) -> subprocess.CompletedProcess[str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "TESTHARNESS_", "TESTMON_"))}
        env.update(
            PATH=f"{self.python.parent}{os.pathsep}{env.get('PATH', '')}",
            PYTHONPATH=str(self.path),  # the project's package, for pytest and the Ray workers
            VIRTUAL_ENV=str(self.python.parent.parent),
            RAY_ENABLE_UV_RUN_RUNTIME_ENV="0",
        )
        env.pop("RAY_ADDRESS", None)
        # Python writes bytecode here, as on a user's machine: where PYTHONDONTWRITEBYTECODE is
        # set (CI, this suite), every pytest, Ray daemon and Ray worker of the fresh venv would
        # compile pytest, Ray and the harness from source again (the module: 37 -> 21 CPU-s;
        # `uv pip install --compile-bytecode`, all of Ray compiled up front: 33 CPU-s).
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        proc = subprocess.run(args, cwd=self.path, env=env, capture_output=True, text=True, timeout=300, check=False)
        assert proc.returncode == expect, f"{args} -> {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
        return proc

    def pytest(self, *args: str, expect: int = 0) -> subprocess.CompletedProcess[str]:
        return self.run(str(self.python), "-m", "pytest", "--strict-markers",
                        "-rA", *args, expect=expect)  # fmt: skip


def _passed(proc: subprocess.CompletedProcess[str]) -> set[str]:
    return {line.split("::")[-1] for line in proc.stdout.splitlines() if line.startswith("PASSED ")}


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Project:
    if UV is None:
        # The documented workflow runs under uv, so CI must have it; a machine without uv
        # (a GPU box that runs the suite with python3 and carried wheels) cannot build the venv.
        if os.environ.get("CI"):
            pytest.fail("uv is needed to build the fresh venv (pip install uv)")
        pytest.skip("needs uv to build a fresh venv (pip install uv); CI=true makes this a failure")
    base = tmp_path_factory.mktemp("plugin_package")
    venv = base / "venv"
    subprocess.run([UV, "venv", "-q", "--python", sys.executable, str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    pins = [f"{name}=={version(name)}" for name in ("pytest", "pytest-testmon", "ray", "rich", "psutil")]
    proc = subprocess.run(
        [UV, "pip", "install", "-q", "--python", str(python), str(TOOLS_PY), *pins],
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    if proc.returncode and "error sending request for url" in proc.stderr and not os.environ.get("CI"):
        # A machine that reaches no package index (a GPU box with carried wheels).
        pytest.skip(f"no package index reachable to build the fresh venv; CI=true makes this a failure: "
                    f"{proc.stderr.strip().splitlines()[0]}")  # fmt: skip
    assert proc.returncode == 0, proc.stderr

    root = base / "toyproj"  # outside this repository: nothing of it is on the path
    (root / "toypkg").mkdir(parents=True)
    (root / "toypkg" / "__init__.py").write_text("")
    (root / "toypkg" / "actor.py").write_text(ACTOR)
    (root / "toypkg" / "plain.py").write_text(PLAIN)
    (root / "tests").mkdir()
    for name, body in TESTS.items():
        (root / "tests" / name).write_text(textwrap.dedent(body))
    (root / "pyproject.toml").write_text(PYPROJECT)
    return Project(root, python)


def test_the_harness_comes_from_the_venv(project: Project) -> None:
    proc = project.run(str(project.python), "-c", "import testharness; print(testharness.__file__)")
    assert Path(proc.stdout.strip()).is_relative_to(project.python.parent.parent)


def test_marker_groups_tracker_and_markers_registered(project: Project) -> None:
    # --strict-markers: network, quantum (configured groups) and run_first (the plugin's) are known.
    proc = project.pytest("tests/test_plain.py", "tests/test_groups.py", "-v")
    assert _passed(proc) == {"test_first", "test_double", "test_double_zero"}
    order = [line.split("::")[-1].split()[0] for line in proc.stdout.splitlines() if " PASSED" in line]
    assert order[0] == "test_first"  # run_first
    doc = json.loads((project.path / "results" / "unit_results.json").read_text())
    assert set(doc["tests"]) >= {"tests/test_plain.py::test_double", "tests/test_groups.py::test_first"}
    assert [m["doubled"] for m in doc["metrics"].values() if "doubled" in m] == [42]

    proc = project.pytest("tests/test_groups.py", "--with-network")
    assert _passed(proc) == {"test_first", "test_needs_network"}

    proc = project.pytest("tests/test_groups.py", "--quantum-only", expect=4)
    assert "--quantum-only needs the quantum SDK, which cannot be imported" in proc.stderr
    assert "run it as: pip install toy[quantum]" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_shards_split_the_suite(project: Project) -> None:
    # Both shards plan from the same history, as on two CI machines (each run adds to
    # results/unit_results, which would re-balance the next shard's plan).
    history = project.path / "shard_history"
    history.mkdir(exist_ok=True)
    args = ("tests/test_plain.py", "tests/test_groups.py", f"--history-dir={history}")
    first = _passed(project.pytest(*args, "--shard", "1/2"))
    second = _passed(project.pytest(*args, "--shard", "2/2"))
    assert first and second and not first & second
    assert first | second == {"test_first", "test_double", "test_double_zero"}


def test_testmon_selects_the_test_of_an_actor_only_edit(project: Project) -> None:
    seed = project.pytest("--testmon", "tests")
    assert {"test_actor_adds", "test_double"} <= _passed(seed)
    # remote selection's map and state under the names the project configured
    assert (project.path / ".toy_remote_map.json").is_file()
    assert (project.path / ".toy_remote_state.json").is_file()

    actor = project.path / "toypkg" / "actor.py"
    actor.write_text(ACTOR.replace("return x + 1", "return x + 2"))  # only the actor method's body
    rerun = project.pytest("--testmon", "tests")
    assert _passed(rerun) == {"test_actor_adds"}, rerun.stdout


def test_report_reads_the_project_history(project: Project) -> None:
    project.pytest("tests/test_plain.py")  # at least one run in results/unit_results/
    proc = project.run(str(project.python.parent / "testharness"), "report")
    assert "test_double" in proc.stdout or "doubled" in proc.stdout, proc.stdout
