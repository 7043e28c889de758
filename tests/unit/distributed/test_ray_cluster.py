"""GPU counting for the clusters the library starts, and the runtime environment of its jobs."""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import sys
import tempfile
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


# Starts a cluster, then cleans up as after a failed start: the processes that start began
# (GCS, raylet, Ray's Python daemons) are ended and its logs directory is found.
FAILED_START = """
import json, os
import psutil, ray
from nemo_rl.distributed import ray_cluster
before = {p.pid for p in ray_cluster._ray_processes()}
ray.init(address="local", num_cpus=1, include_dashboard=False)
started = [p.pid for p in ray_cluster._ray_processes() if p.pid not in before]
logs_dir = ray_cluster._clean_up_failed_start(before)
alive = [pid for pid in started if psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE]
print("FACTS " + json.dumps({"started": len(started), "alive": alive, "logs_dir": logs_dir,
                              "connected": ray.is_initialized()}))
"""


def test_a_failed_starts_processes_are_ended_and_its_logs_found() -> None:
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env["RAY_TMPDIR"] = str(Path(tempfile.mkdtemp(prefix="rt", dir="/tmp")))  # short: Ray's socket paths
    try:
        done = subprocess.run(
            [sys.executable, "-c", FAILED_START], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
        )
    finally:
        shutil.rmtree(env["RAY_TMPDIR"], ignore_errors=True)
    lines = [line for line in done.stdout.splitlines() if line.startswith("FACTS ")]
    assert done.returncode == 0 and lines, done.stderr[-3000:]
    facts = json.loads(lines[0].removeprefix("FACTS "))
    assert facts["started"] >= 2 and facts["alive"] == [], facts  # GCS and raylet at least, none left
    assert facts["logs_dir"].startswith(env["RAY_TMPDIR"]) and facts["logs_dir"].endswith("/logs"), facts
    assert not facts["connected"]
