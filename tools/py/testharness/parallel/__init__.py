"""`-n N` (pytest-xdist): every worker on ONE Ray cluster, GPUs handed out by Ray.

In a project with `[tool.testharness]` (where the harness is merely installed, `-n` is
xdist's alone: no cluster, no scheduling of ours), the controller (the process that runs
`pytest -n N`) starts the Ray cluster while xdist spawns its workers and they collect, or
joins the one in RAY_ADDRESS; every worker exports its address as RAY_ADDRESS before its
first test (`shared_ray_address(config)` for a conftest that needs it sooner), so every
worker's `ray.init()` joins it and Ray's resource accounting places every actor of every
test (a GPU actor waits for a free GPU; two never share one). The controller stops the
cluster it started when the run ends. How to start it is the project's choice: implement
`pytest_testharness_start_ray(config, workers)` in a conftest (return the address) to use
its own start-up (retries, sizing); otherwise `ray.init(address="local")`. It runs in a
thread of the controller while the workers start: they get the address and the RAY_*
variables Ray's start set, not other changes the hook makes to the environment. Without
Ray (not installed, blocked, or a stand-in in sys.modules["ray"]: real_ray) the workers run
with no shared cluster, as the controller's line says; everything else below still holds.

Placement of what Ray does not see:

- `@pytest.mark.uses_cuda`: the test uses GPUs outside Ray's accounting (CUDA in the test
  process, or a child process with a Ray cluster of its own). Under -n, when this node has
  GPUs, the test holds them in the shared cluster while it runs (a zero-CPU placeholder actor
  asking for them), so Ray counts what it uses: a quarter of a one-GPU node (tests share that
  GPU, as fractional actors do; the tracker then reads each test's own processes), every GPU
  of a larger node (no actor of another test is placed on a GPU it uses). It waits for them
  like an actor would (TESTHARNESS_GPU_LEASE_TIMEOUT_S, 600).
- `@pytest.mark.run_first`: under -n no other test starts before every selected run_first
  test has finished (they are first in every worker's queue, so none waits on itself).

Module and session fixtures are built once per worker: by default the controller
distributes whole test files (`--dist loadfile`; pass `--dist` to choose), so a module
fixture (a policy worker holding a GPU) lives on one worker and never waits on a copy of
itself on another. Files are handed out longest first by their tests' recorded durations
(results history, as shards are planned; without it, by number of tests as xdist does): the
longest file starts at once instead of being the run's tail. The workers order the files and
run_first tests stay in front: a worker never waits at the barrier for a file still queued.
With recorded durations the harness also schedules the files itself (`next_file`): a worker
gets its next file when one test of its current file is left (xdist's own schedule: two), and
a worker still busy with a long test gets the shortest file waiting rather than the longest,
so no long file queues behind a long test while other workers fall idle.

A test that kills its worker (segfault, `os._exit`, SIGKILL) is recorded failed, once ("worker
'gwN' crashed while running ..."); xdist replaces the worker, and the rest of that file runs on
the next worker free, each test once; the crashed test is not run again, and a crashed
run_first test counts as finished. The run goes on and exits 1. (With loadfile the harness
always uses its own scheduler, xdist_schedule.py, which says what xdist's own does instead.)
Each crash uses up one of xdist's --max-worker-restart (default 4 per worker).

Results, metrics, testmon and sharding under -n are the other plugins' business (the
controller writes; workers send what they measured with their reports).
"""

from __future__ import annotations

from testharness.parallel.handover import shared_ray_address

# The two roles, each a plugin module of its own (an xdist worker loads the controller's too:
# its hooks keep out of a worker's way, and the other way round).
pytest_plugins = ["testharness.parallel.controller", "testharness.parallel.worker"]

__all__ = ["shared_ray_address"]
