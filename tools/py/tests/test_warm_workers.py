"""Warm Ray workers (testharness.warm_workers) and the private Ray calls behind them
(real_ray.session_dir, real_ray.prestart_workers), asked for true answers on a real cluster.
That actors then start in the warm processes with their imports done is the unit suite's
(tests/unit/distributed/test_warm_workers.py, with the library's worker groups)."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pytest

from testharness import real_ray, warm_workers


def _job_processes(job_hex: str) -> list[int]:
    """Processes of this machine that Ray started for job `job_hex` (its worker processes)."""
    pids = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if f"RAY_JOB_ID={job_hex}".encode() in environ and int(pid) != os.getpid():
            pids.append(int(pid))
    return pids


def test_the_session_folder_is_this_clusters(ray_cluster: Any) -> None:
    session = real_ray.session_dir(ray_cluster)
    assert session is not None and Path(session, "logs").is_dir()


def test_prestarted_workers_start_for_this_job_and_claim_the_slots(ray_cluster: Any) -> None:
    """Asked for 2, the raylet starts idle processes of this job at once (no task, no actor);
    the job was not started with the preload hook, so the slots stay unclaimed."""
    job = real_ray.job_hex(ray_cluster)
    before = set(_job_processes(job))
    assert warm_workers.prestart(2, keep_alive_s=5)  # gone again soon: nothing idle at the session's end
    slots = warm_workers._slots(job)
    assert sorted(os.listdir(slots)) == ["0", "1"]
    deadline = time.monotonic() + 120
    while not set(_job_processes(job)) - before:
        assert time.monotonic() < deadline, "the raylet started no worker for this job"
        time.sleep(0.2)


def test_no_warm_workers_where_ray_cannot_prestart(ray_cluster: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from ray.core.generated import node_manager_pb2

    monkeypatch.delattr(node_manager_pb2, "PrestartWorkersRequest")  # as a Ray without the call
    assert warm_workers.prestart(3) is False
    assert not warm_workers._slots(real_ray.job_hex(ray_cluster)).exists()  # no slot left to claim
    assert warm_workers.prestart(0) is False
