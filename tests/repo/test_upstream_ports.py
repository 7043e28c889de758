"""Upstream NeMo RL test files that lean on its conftest run here unchanged (subprocess,
through the real tests/run_unit.sh, in a scratch project with this repository's pyproject.toml
and tests/unit/conftest.py):

- a file that uses Ray and names no fixture (upstream's `init_ray_cluster` is autouse): `import
  ray` at the top, or only nemo_rl's cluster API; it finds Ray up, on the run's one cluster,
  also under -n (the cluster the controller started, not one per worker);
- `@pytest.mark.asyncio` tests (pytest-asyncio, strict mode), an async fixture, an awaited Ray
  object reference;
- `from tests.unit.conftest import TEST_ASSETS_DIR`;
- a file that imports Ray (through nemo_rl) but replaces upstream's autouse fixtures with
  no-ops, and `session_data` by `_unit_test_data`: no Ray starts for it;
- a run of files that do not import Ray starts no Ray cluster, nor does a `--testmon` run
  with no change;
- `--cov` data lands in tests/.coverage, where upstream's run_unit.sh leaves it and its CI
  collects it.

Each Ray cluster a run starts leaves a session folder in RAY_TMPDIR: how many started is counted
there.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

# ------------------------------------------------ upstream-style files (as they are written there)

RAY_WITHOUT_A_FIXTURE = """\
import pytest
import ray


@ray.remote(num_cpus=0)
def square(x):
    return x * x


def test_ray_is_up():
    assert ray.is_initialized()
    assert ray.get(square.remote(7)) == 49


def test_the_cluster_it_is_on(tracker):
    tracker.track("gcs_address", ray.get_runtime_context().gcs_address)


@pytest.mark.asyncio
async def test_await_an_object_ref():
    assert await square.remote(3) == 9
"""

CLUSTER_API_WITHOUT_A_FIXTURE = """\
from nemo_rl.distributed.virtual_cluster import RayVirtualCluster


def test_virtual_cluster_reserves_its_bundles():
    cluster = RayVirtualCluster(2, cpus_per_worker=0.25)
    try:
        assert cluster.placement_group.bundle_count == 2
    finally:
        cluster.shutdown()
"""

ASYNCIO = """\
import asyncio

import pytest
import pytest_asyncio


@pytest_asyncio.fixture
async def queue():
    q = asyncio.Queue()
    yield q
    assert q.empty()


@pytest.mark.asyncio
async def test_gather(tracker):
    async def double(x):
        await asyncio.sleep(0.01)
        return 2 * x

    assert await asyncio.gather(double(1), double(2)) == [2, 4]
    tracker.track("awaited", True)


@pytest.mark.asyncio
async def test_async_fixture(queue):
    await queue.put("x")
    assert await queue.get() == "x"


class TestInAClass:
    @pytest.mark.asyncio
    async def test_method(self):
        assert asyncio.get_running_loop().is_running()
"""

TEST_ASSETS = """\
import os
from tempfile import TemporaryDirectory

from tests.unit.conftest import TEST_ASSETS_DIR


def test_a_temporary_directory_in_the_test_assets():
    with TemporaryDirectory(dir=TEST_ASSETS_DIR) as tempdir:
        assert os.path.dirname(tempdir) == TEST_ASSETS_DIR
        assert os.path.isdir(f"{tempdir}")
    assert "prepared" in os.listdir(TEST_ASSETS_DIR)
"""

UNIT_TEST_DATA = """\
import pytest

from nemo_rl.distributed.ray_cluster import visible_gpu_count


@pytest.fixture(scope="session", autouse=True)
def init_ray_cluster():
    \"\"\"This CPU-only module does not need the suite-wide Ray cluster.\"\"\"
    yield


@pytest.fixture(scope="session", autouse=True)
def ray_gpu_monitor():
    yield None


@pytest.fixture(scope="session", autouse=True)
def session_data(_unit_test_data):
    yield _unit_test_data


def test_the_record_has_upstreams_keys(session_data):
    assert session_data["exit_status"] == "was not set"
    assert {"git_commit", "start_time", "metrics", "gpu_types", "coverage"} <= set(session_data)


def test_a_metric(tracker):
    tracker.track("loss", 0.25)


def test_cuda_visible_devices_limits_the_count():
    assert visible_gpu_count(8, "0,1") == 2
"""

# Ours, not upstream's: run alone, it must find no Ray cluster started (a file of its own, written
# where a test runs it: in a run beside the Ray files it runs after them, with the cluster up).
NO_RAY = """\
import sys

from nemo_rl.config import load_config


def test_no_ray_here():
    ray = sys.modules.get("ray")
    assert ray is None or not ray.is_initialized()
    assert callable(load_config)
"""

# Ours: under --cov, the conftest hands coverage to the processes the tests start (an example run
# as a user runs it, Ray workers); the library hands it to its own jobs' Ray workers.
COV_CHILDREN = """\
import os


def test_child_processes_are_measured():
    assert os.environ.get("COVERAGE_PROCESS_CONFIG")
"""

PORTS = {
    "distributed/test_ray_without_a_fixture.py": RAY_WITHOUT_A_FIXTURE,
    "distributed/test_cluster_api_without_a_fixture.py": CLUSTER_API_WITHOUT_A_FIXTURE,
    "test_asyncio.py": ASYNCIO,
    "test_assets_dir.py": TEST_ASSETS,
    "test_unit_test_data.py": UNIT_TEST_DATA,
}
NOT_RAY = ["unit/test_asyncio.py", "unit/test_assets_dir.py", "unit/test_unit_test_data.py", "unit/test_no_ray.py"]


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """This repository's pyproject.toml, run_unit.sh and tests/unit/conftest.py, with the
    upstream-style files in tests/unit; test assets: a folder with one file in it."""
    root = tmp_path / "proj"
    unit = root / "tests" / "unit"
    (unit / "distributed").mkdir(parents=True)
    shutil.copy(REPO / "pyproject.toml", root / "pyproject.toml")
    shutil.copy(REPO / "tests" / "run_unit.sh", root / "tests" / "run_unit.sh")
    for package in (root / "tests", unit, unit / "distributed"):
        (package / "__init__.py").touch()
    shutil.copy(REPO / "tests" / "unit" / "conftest.py", unit / "conftest.py")
    (unit / "test_assets").mkdir()
    (unit / "test_assets" / "prepared").touch()
    for name, text in PORTS.items():
        (unit / name).write_text(text)
    return root


@pytest.fixture
def ray_tmp() -> Iterator[Path]:
    """RAY_TMPDIR for the runs: short (Ray's socket paths must fit 107 bytes)."""
    path = Path(tempfile.mkdtemp(prefix="rt", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _clusters_started(ray_tmp: Path) -> int:
    return len(list((ray_tmp / "ray").glob("session_2*")))


def _run(cwd: Path, ray_tmp: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("PYTEST_", "TESTHARNESS_", "COVERAGE_")) and k != "RAY_ADDRESS"
    }
    env.update(PYTHON=sys.executable, TESTHARNESS_NO_DISCOVERY="1", RAY_TMPDIR=str(ray_tmp))
    return subprocess.run(list(args), cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


def _record(project: Path) -> dict:
    return json.loads((project / "tests" / "unit" / "unit_results.json").read_text())


def _outcomes(project: Path) -> dict[str, str]:
    return {nodeid.split("/unit/", 1)[1]: t["outcome"] for nodeid, t in _record(project)["tests"].items()}


EVERY_TEST = {
    "distributed/test_ray_without_a_fixture.py::test_ray_is_up",
    "distributed/test_ray_without_a_fixture.py::test_the_cluster_it_is_on",
    "distributed/test_ray_without_a_fixture.py::test_await_an_object_ref",
    "distributed/test_cluster_api_without_a_fixture.py::test_virtual_cluster_reserves_its_bundles",
    "test_asyncio.py::test_gather",
    "test_asyncio.py::test_async_fixture",
    "test_asyncio.py::TestInAClass::test_method",
    "test_assets_dir.py::test_a_temporary_directory_in_the_test_assets",
    "test_unit_test_data.py::test_the_record_has_upstreams_keys",
    "test_unit_test_data.py::test_a_metric",
    "test_unit_test_data.py::test_cuda_visible_devices_limits_the_count",
}


def test_upstream_style_files_run_unchanged_and_an_unchanged_testmon_run_starts_no_ray(
    project: Path, ray_tmp: Path
) -> None:
    proc = _run(project / "tests", ray_tmp, "bash", "run_unit.sh", "unit/", "--testmon")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert proc.stdout.rstrip().endswith("run_unit: all selected tests passed")
    assert _outcomes(project) == dict.fromkeys(EVERY_TEST, "passed")
    metrics = _record(project)["metrics"]
    assert metrics["test_asyncio::test_gather"]["awaited"] is True  # the coroutine's body ran
    assert metrics["test_unit_test_data::test_a_metric"]["loss"] == 0.25
    assert re.fullmatch(r"[\d.]+:\d+", metrics["test_ray_without_a_fixture::test_the_cluster_it_is_on"]["gcs_address"])
    assert _clusters_started(ray_tmp) == 1  # both Ray files on the session's one cluster

    again = _run(project / "tests", ray_tmp, "bash", "run_unit.sh", "unit/", "--testmon")
    assert again.returncode == 0, again.stdout + again.stderr
    assert _record(project)["tests"] == {}  # nothing changed: nothing ran ...
    assert _clusters_started(ray_tmp) == 1  # ... and no Ray started


def test_files_that_do_not_import_ray_start_no_cluster(project: Path, ray_tmp: Path) -> None:
    (project / "tests" / "unit" / "test_no_ray.py").write_text(NO_RAY)
    proc = _run(project / "tests", ray_tmp, "bash", "run_unit.sh", *NOT_RAY)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert set(_outcomes(project).values()) == {"passed"} and len(_outcomes(project)) == 8
    # test_unit_test_data.py imports Ray (through nemo_rl), but replaces init_ray_cluster
    assert _clusters_started(ray_tmp) == 0


def test_under_xdist_the_ray_files_join_the_cluster_of_the_run(project: Path, ray_tmp: Path) -> None:
    proc = _run(project / "tests", ray_tmp, "bash", "run_unit.sh", "unit/", "-n", "2")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert _outcomes(project) == dict.fromkeys(EVERY_TEST, "passed")
    started = re.search(r"testharness: 2 xdist workers share the Ray cluster started at (\S+) ", proc.stdout)
    assert started, proc.stdout
    seen = _record(project)["metrics"]["test_ray_without_a_fixture::test_the_cluster_it_is_on"]["gcs_address"]
    assert seen == started.group(1)  # the controller's cluster, joined by the worker
    assert _clusters_started(ray_tmp) == 1  # no worker started one of its own


# ------------------------------------------------ where --cov data goes


@pytest.mark.parametrize(
    "where, command",
    [
        ("tests", ["bash", "run_unit.sh"]),  # upstream's habit: from tests/
        (".", ["bash", "tests/run_unit.sh"]),  # upstream's L0 scripts: from the root
        ("tests/unit", ["bash", "../run_unit.sh"]),
        (".", [sys.executable, "-m", "pytest"]),  # plain pytest from the root: [tool.coverage.run]
    ],
    ids=["run_unit-from-tests", "run_unit-from-root", "run_unit-from-tests-unit", "pytest-from-root"],
)
def test_cov_data_lands_in_tests_dot_coverage(project: Path, ray_tmp: Path, where: str, command: list[str]) -> None:
    from coverage import CoverageData

    unit = project / "tests" / "unit"
    (unit / "test_no_ray.py").write_text(NO_RAY)
    (unit / "test_cov_children.py").write_text(COV_CHILDREN)
    cwd = project / where
    paths = [os.path.relpath(unit / name, cwd) for name in ("test_no_ray.py", "test_cov_children.py")]
    proc = _run(cwd, ray_tmp, *command, *paths, "--cov=nemo_rl")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert not (cwd / ".coverage").exists() or where == "tests"
    data = CoverageData(str(project / "tests" / ".coverage"))
    data.read()
    measured = {Path(f).relative_to(REPO).as_posix() for f in data.measured_files()}
    assert "nemo_rl/config.py" in measured  # what the test imported
    assert _record(project)["coverage"] > 0  # the total in unit_results.json, as before


def test_cov_append_adds_to_tests_dot_coverage(project: Path, ray_tmp: Path) -> None:
    """Upstream's L0 scripts run the mcore tests second, with --cov-append."""
    from coverage import CoverageData

    unit = project / "tests" / "unit"
    (unit / "test_no_ray.py").write_text(NO_RAY)
    (unit / "test_loss.py").write_text(
        "from nemo_rl.algorithms import loss_functions\n\n\ndef test_loss():\n    pass\n"
    )
    for path, extra in (("unit/test_no_ray.py", []), ("unit/test_loss.py", ["--cov-append"])):
        proc = _run(project / "tests", ray_tmp, "bash", "run_unit.sh", path, "--cov=nemo_rl", *extra)
        assert proc.returncode == 0, proc.stdout + proc.stderr
    data = CoverageData(str(project / "tests" / ".coverage"))
    data.read()
    measured = {Path(f).relative_to(REPO).as_posix() for f in data.measured_files()}
    assert {"nemo_rl/config.py", "nemo_rl/algorithms/loss_functions.py"} <= measured
    assert not list(project.glob(".coverage*")) and not list((project / "tests").glob(".coverage.*"))
