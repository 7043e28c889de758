"""The hang report's task workers, with a real Ray cluster: under -n every xdist worker is a
job of one shared cluster, and a hung test must not be blamed on another job's busy worker."""

from __future__ import annotations

import time
from typing import Any

import ray

from testharness import real_ray
from testharness.hygiene import hang


@ray.remote(num_cpus=0)
class SlowToStart:
    def __init__(self) -> None:
        time.sleep(30)  # busy in __init__, as a policy worker loading its model is

    def ready(self) -> bool:
        return True


def _busy_workers(job: str) -> list[str]:
    return [p.title for p in hang._task_workers(hang._local_raylet_pid(ray), set(), job)]


def test_a_busy_worker_of_another_job_is_not_this_jobs_task_worker(ray_cluster: Any) -> None:
    job = real_ray.job_hex(ray)
    actor = SlowToStart.remote()
    try:
        deadline = time.monotonic() + 120
        while not any(t.startswith("ray::SlowToStart.__init__") for t in _busy_workers(job)):
            assert time.monotonic() < deadline, "the actor's worker never started its __init__"
            time.sleep(0.2)
        # The raylet started that worker for this driver's job; seen from any other job
        # (another xdist worker's driver), it is not there.
        other = "ff" + job[2:]
        assert not [t for t in _busy_workers(other) if t.startswith("ray::SlowToStart")]
    finally:
        ray.kill(actor)
