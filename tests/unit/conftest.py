"""Shared fixtures of the unit tests: offline assets and one Ray cluster per session."""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

UNIT_DIR = Path(__file__).resolve().parent

# Ray renices its workers to 15: beside any busy process (another job on a CI machine) an
# actor then gets ~3% of a core and a test that takes 6 s takes minutes. Every Ray cluster the
# tests start, here or in a subprocess, runs its workers at normal priority (nemo_rl's
# start_local_ray does the same for the clusters it starts).
os.environ.setdefault("RAY_worker_niceness", "0")
# Under `uv run`, Ray would start every worker from a uv-built copy of the project (the
# working directory packed, a venv made per job): the tests want this interpreter and
# environment, as-is (and coverage follows workers only then).
os.environ.setdefault("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")
# Ray prestarts one idle worker per logical CPU when a driver connects (16 interpreters
# importing Ray on a 16-core GPU machine, for each cluster a test or an example starts); the
# tests start actors, each in a worker process of its own, so the prestarted ones are waste.
os.environ.setdefault("RAY_prestart_worker_first_driver", "0")
ASSETS = UNIT_DIR / "test_assets"


def session_cpus(workers: int) -> int:
    """Logical CPUs for the Ray cluster that `workers` xdist workers share. A worker group
    reserves 0.5-1 CPU per policy worker and a test module may hold one group in a fixture
    while its test builds another: with only one CPU per core, two workers' fixtures can each
    wait for the CPUs the other holds. Reservations here are bookkeeping, not load."""
    return max(os.cpu_count() or 1, 4 * workers)


def pytest_testharness_start_ray(config: pytest.Config, workers: int) -> str:
    """The Ray cluster of a `-n` run, started by the xdist controller with the library's own
    start-up (retried on a busy machine)."""
    from nemo_rl.distributed.ray_cluster import init_ray

    info = init_ray(num_cpus=session_cpus(workers))
    return info.address


@pytest.fixture(scope="session")
def test_assets() -> Path:
    """The offline assets, built on first use if missing (a few seconds)."""
    spec = importlib.util.spec_from_file_location("prepare_unit_test_assets", UNIT_DIR / "prepare_unit_test_assets.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return Path(module.prepare(ASSETS, log=lambda _msg: None))


@pytest.fixture(scope="session")
def tiny_llama(test_assets: Path) -> str:
    return str(test_assets / "tiny_llama")


@pytest.fixture(scope="session")
def tiny_qwen2(test_assets: Path) -> str:
    return str(test_assets / "tiny_qwen2")


@pytest.fixture(scope="session")
def ray_cluster() -> Iterator[object]:
    """Start Ray once for the session (or join RAY_ADDRESS / a local head) and stop what we started."""
    import ray

    from nemo_rl.distributed.ray_cluster import RayStartError, init_ray

    already = ray.is_initialized()
    try:
        info = init_ray()  # a busy machine: retried for up to NRL_RAY_START_TIMEOUT_S
    except RayStartError as exc:
        pytest.fail(str(exc), pytrace=False)  # one line, repeated by every test that needs Ray
    yield info
    if not already:
        ray.shutdown()
