"""The hang report's task workers, with a real Ray cluster: under -n every xdist worker is a
job of one shared cluster, and a hung test must not be blamed on another job's busy worker;
a task Ray starts again after its worker was ended is ended too."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from typing import Any

import pytest
import ray

from testharness import real_ray
from testharness.hygiene import hang


@ray.remote(num_cpus=0)
class SlowToStart:
    def __init__(self) -> None:
        time.sleep(30)  # busy in __init__, as a policy worker loading its model is

    def ready(self) -> bool:
        return True


@ray.remote(num_cpus=0, max_retries=2)
def sleeps_long() -> None:
    time.sleep(3600)


def _within(find: Callable[[], list[Any]], timeout_s: float = 120.0) -> list[Any]:
    deadline = time.monotonic() + timeout_s
    while not (found := find()):
        assert time.monotonic() < deadline, "not within the time"
        time.sleep(0.2)
    return found


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


def test_a_task_started_again_after_its_worker_was_ended_is_ended_too(ray_cluster: Any) -> None:
    """Ray retries a task whose worker died: here one SIGKILLed, as the harness does to a task
    worker that outlasts its cancel (in CI, a cancel racing its worker's death once did the same,
    ray-project/ray#54260). The hang's ending finds the new worker, cancels the task, ends it."""
    job = real_ray.job_hex(ray)
    ref = sleeps_long.remote()

    def running() -> list[Any]:
        return [p for p in hang._task_workers(hang._local_raylet_pid(ray), set(), job) if p.title == "ray::sleeps_long"]

    try:
        first = _within(running)
        os.kill(first[0].pid, signal.SIGKILL)
        _within(lambda: [p for p in running() if p.pid != first[0].pid])  # Ray started it again
        assert hang.end_task_retries(first, rounds=1) == []
        assert not running()
        # Ended, not running on: Ray 2.60 reports the cancel, Ray 2.46 the killed worker.
        with pytest.raises((ray.exceptions.TaskCancelledError, ray.exceptions.WorkerCrashedError)):
            ray.get(ref, timeout=60)
    finally:
        ray.cancel(ref, force=True)
