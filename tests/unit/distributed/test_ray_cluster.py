"""GPU counting for the clusters the library starts, and the runtime environment of its jobs."""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path

import pytest

from nemo_rl.distributed import ray_cluster
from nemo_rl.distributed.ray_cluster import FORWARDED_ENV, job_runtime_env, visible_gpu_count

ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.parametrize(
    "visible, expected",
    [
        (None, 8),  # unset: every GPU
        ("", 0),  # hides them all (how the tests run an example on the CPU)
        ("-1", 0),
        ("0", 1),
        ("2,5", 2),
        ("0,1,-1,3", 2),  # CUDA stops at the first invalid entry
        ("GPU-01436b86-e8f4-6356-8007-51b665c38c3f", 1),  # UUIDs count like indices
        ("0,1,2,3,4,5,6,7,8,9", 8),  # never more than the machine has
    ],
)
def test_cuda_visible_devices_limits_the_count(visible: str | None, expected: int) -> None:
    assert visible_gpu_count(8, visible) == expected


def test_a_job_carries_the_forwarded_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in FORWARDED_ENV:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(ray_cluster, "child_coverage_env", dict)  # as when coverage measures nothing
    assert job_runtime_env() == {}  # nothing to forward: Ray's own default environment
    monkeypatch.setenv("PYTHONPATH", "/checkout")
    monkeypatch.setenv("NCCL_NVLS_ENABLE", "0")
    monkeypatch.setenv("UNRELATED", "1")
    assert job_runtime_env() == {"env_vars": {"PYTHONPATH": "/checkout", "NCCL_NVLS_ENABLE": "0"}}


def test_a_measured_driver_hands_coverage_to_its_jobs_workers_not_to_its_own_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Under a coverage with a config file the job's workers get COVERAGE_PROCESS_CONFIG, in
    parallel mode; this process's environment is left as it was."""
    from coverage import Coverage

    for name in FORWARDED_ENV:
        monkeypatch.delenv(name, raising=False)
    before = dict(os.environ)
    cov = Coverage(data_file=None, config_file=str(ROOT / "pyproject.toml"))
    cov.start()
    try:
        handed = job_runtime_env()["env_vars"]["COVERAGE_PROCESS_CONFIG"]
    finally:
        cov.stop()
    assert dict(os.environ) == before
    assert json.loads(base64.b64decode(handed))["parallel"] is True  # each worker a file of its own
    assert cov.config.parallel is False  # the driver's own data file, as `coverage run -a` needs
