"""Traced actors (remote_select/worker_trace.py): the functions an actor ran, per test.

Ray must start after the recorder for its workers to trace themselves, so the scenarios
run in a process of their own with a cluster of their own. This module imports nothing
from the library: the process it starts makes its tests "opaque" (static import closure),
and that closure stays small.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from testharness.remote_select.reach import ReachRecorder

ROOT = Path(__file__).resolve().parents[3]
HERE = Path(__file__).resolve().relative_to(ROOT).as_posix()


class Calc:
    def __init__(self) -> None:
        self.total = 0

    def add(self, x: int) -> int:
        self.total += x
        return self.total

    def mul(self, x: int) -> int:
        return _double(x) // 2 * x

    def spawn(self) -> int:
        return subprocess.run([sys.executable, "-c", "pass"], check=True).returncode

    def import_in_threads(self, seconds: float) -> list[str]:
        """What transformers' weight loading does: threads running `import` statements while
        more threads start. What went wrong: errors, and threads that never ran."""
        import threading
        import time

        problems: list[str] = []
        ran: list[int] = []
        end = time.monotonic() + seconds

        def importer() -> None:
            while time.monotonic() < end:
                try:
                    import json  # noqa: F401  already loaded: what most imports in a function are

                    sys.modules.pop("colorsys", None)
                    import colorsys  # noqa: F401  loaded again: the 3.11 profiler pauses
                except RuntimeError as e:
                    problems.append(str(e))
            if sys.version_info < (3, 12) and sys.getprofile() is None:
                problems.append("an importing thread is no longer traced")

        def starter() -> None:
            started = 0
            while time.monotonic() < end:
                batch = [threading.Thread(target=ran.append, args=(1,)) for _ in range(10)]
                for t in batch:
                    t.start()
                for t in batch:
                    t.join()
                started += len(batch)
            if len(ran) < started:  # the only starter: every thread it started should have run
                problems.append(f"{started - len(ran)} of {started} started threads never ran")

        threads = [threading.Thread(target=importer) for _ in range(6)] + [threading.Thread(target=starter)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return problems

    def project_hook(self) -> str | None:
        return os.environ.get("PROJECT_HOOK")


def _project_hook() -> None:
    """The project's own worker set-up hook (nemo_rl's warm workers import torch in one),
    given to ray.init by name: the harness's trace hook runs it, then starts tracing."""
    os.environ["PROJECT_HOOK"] = "after tracing" if "_testharness_remote_trace" in sys.modules else "before tracing"


class SlowStart:
    """A late worker: its constructor outlasts the caller's patience."""

    def __init__(self, seconds: float) -> None:
        import time

        time.sleep(seconds)


def _double(x: int) -> int:
    return 2 * x


def _task(x: int) -> int:
    return _double(x) + 1


def _unused(x: int) -> int:
    return x


def _traced_scenarios() -> dict[str, list[str] | None]:
    """Run in a process of its own: Ray must start after the recorder to trace its workers."""
    import ray
    from ray import cloudpickle

    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    rec = ReachRecorder(str(ROOT))
    rec.install()
    hook = f"{__name__}._project_hook"  # workers import it by name (PYTHONPATH: `traced`)
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, runtime_env={"worker_process_setup_hook": hook})
    remote_calc = ray.remote(Calc)

    def period(name: str, fixtures: list[str]) -> list[str] | None:
        rec.settle()  # what the pytest plugin does before reading a test's reach
        rec.pop()
        return rec.reach_of(name, fixtures)

    out: dict[str, list[str] | None] = {}
    rec.push_test("t::first")
    rec.push_fixture("calc")
    calc = remote_calc.remote()
    rec.settle()  # end of the fixture's set-up
    rec.pop()
    assert ray.get(calc.add.remote(1)) == 1
    out["first"] = period("t::first", ["calc"])
    rec.push_test("t::second")
    assert ray.get(calc.mul.remote(3)) == 9
    out["second"] = period("t::second", ["calc"])
    rec.push_test("t::idle")  # requests the fixture, calls nothing
    out["idle"] = period("t::idle", ["calc"])
    rec.push_test("t::terminated")
    other = remote_calc.remote()
    assert ray.get(other.mul.remote(1)) == 1
    other.__ray_terminate__.remote()
    out["terminated"] = period("t::terminated", [])
    rec.push_test("t::threaded")
    threaded = remote_calc.options(max_concurrency=2).remote()
    assert ray.get(threaded.add.remote(1)) == 1
    out["threaded"] = period("t::threaded", [])
    rec.push_test("t::dropped")
    dropped = remote_calc.remote()
    assert ray.get(dropped.add.remote(1)) == 1
    del dropped  # out of scope: Ray ends it before it could report its last calls
    out["dropped"] = period("t::dropped", [])
    rec.push_test("t::spawned")
    spawner = remote_calc.remote()
    assert ray.get(spawner.spawn.remote()) == 0
    out["spawned"] = period("t::spawned", [])
    rec.push_test("t::threads_import")
    importer = remote_calc.remote()
    problems = ray.get(importer.import_in_threads.remote(2.0))
    out["threads_import"] = period("t::threads_import", []) if not problems else problems
    rec.push_test("t::killed_constructing")
    late = ray.remote(SlowStart).remote(600)
    import time

    time.sleep(1.0)
    began = time.monotonic()
    ray.kill(late)  # no report can come before its constructor returns: not waited for
    out["killed_constructing_s"] = [f"{time.monotonic() - began:.3f}"]
    out["killed_constructing"] = period("t::killed_constructing", [])
    rec.push_test("t::killed_beside_constructing")  # a group: one rank failed, its peer waits for it
    ready = remote_calc.remote()
    assert ray.get(ready.add.remote(1)) == 1
    peer = ray.remote(SlowStart).remote(600)
    time.sleep(1.0)
    began = time.monotonic()
    ray.kill(ready)  # its own report is taken; the peer is not asked
    out["killed_beside_constructing_s"] = [f"{time.monotonic() - began:.3f}"]
    ray.kill(peer)
    out["killed_beside_constructing"] = period("t::killed_beside_constructing", [])
    remote_task = ray.remote(_task)
    rec.push_test("t::task")
    assert ray.get(remote_task.remote(3)) == 7
    out["task"] = period("t::task", [])
    rec.push_test("t::task_no_returns")
    remote_task.options(num_returns=0).remote(1)  # no ref, no task id to find its report by
    out["task_no_returns"] = period("t::task_no_returns", [])
    # Any traced actor's worker ran the hook: the importer's (held: Ray 2.46 loses a handle
    # used in the same expression), not one more worker started for it.
    out["project_hook"] = [ray.get(importer.project_hook.remote())]
    ray.shutdown()
    rec.uninstall()
    return out


@pytest.fixture(scope="module")
def traced() -> dict[str, list[str] | None]:
    code = (
        f"import json, sys; sys.path[:0] = [{str(ROOT / 'tools/py')!r}, {str(Path(__file__).parent)!r}, {str(ROOT)!r}]; "
        "import test_remote_select_trace as t; print('RESULT', json.dumps(t._traced_scenarios()))"
    )
    path = [str(ROOT / "tools/py"), str(Path(__file__).parent), os.environ.get("PYTHONPATH", "")]
    env = {**os.environ, "RAY_ENABLE_UV_RUN_RUNTIME_ENV": "0", "PYTHONPATH": os.pathsep.join(filter(None, path))}
    env.pop("RAY_ADDRESS", None)
    proc = subprocess.run(
        [sys.executable, "-c", code], check=False, capture_output=True, text=True, timeout=300, env=env, cwd=ROOT
    )
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, proc.stdout[-3000:] + proc.stderr[-3000:]
    return json.loads(lines[-1][len("RESULT ") :])  # type: ignore[no-any-return]


def _units(reach: list[str] | None) -> set[str]:
    assert reach is not None
    return {e.split("::", 1)[1] for e in reach if e.startswith(HERE + "::")} - {"<module>", "Calc"}


def test_a_traced_actor_reports_the_functions_it_ran(traced: dict[str, list[str] | None]) -> None:
    assert _units(traced["first"]) == {"Calc.__init__", "Calc.add"}
    assert "@" + HERE in traced["first"]  # type: ignore[operator]  import-time code of the actor's module
    assert HERE not in traced["first"]  # type: ignore[operator]  not the whole module
    # Cumulative per actor: state left by earlier calls may matter to later ones.
    assert _units(traced["second"]) == {"Calc.__init__", "Calc.add", "Calc.mul", "_double"}
    assert _units(traced["idle"]) == {"Calc.__init__"}  # what the fixture's set-up ran
    assert _units(traced["terminated"]) == {"Calc.__init__", "Calc.mul", "_double"}  # asked before it ended
    assert HERE not in traced["terminated"]  # type: ignore[operator]


def test_a_task_reports_the_functions_it_ran_or_falls_back_to_its_module(traced: dict[str, list[str] | None]) -> None:
    assert _units(traced["task"]) == {"_task", "_double"}
    assert "@" + HERE in traced["task"]  # type: ignore[operator]  import-time code of its module
    assert HERE not in traced["task"]  # type: ignore[operator]
    assert HERE in traced["task_no_returns"]  # type: ignore[operator]  no report to be had: its module whole


def test_threads_importing_at_once_stay_traced(traced: dict[str, list[str] | None]) -> None:
    """On 3.11 a thread's `sys.setprofile` could fail while another thread's ran its audit
    hooks: an import raised (CI: a transformers weight-loading thread died of "Cannot install
    a profile function while another profile function is being installed"), or a thread
    being started died before running its target."""
    assert "Calc.import_in_threads" in _units(traced["threads_import"]), traced["threads_import"]


def test_actors_that_cannot_be_traced_fall_back_to_their_modules(traced: dict[str, list[str] | None]) -> None:
    assert HERE in traced["threaded"]  # type: ignore[operator]  calls may interleave: module granularity
    assert _units(traced["threaded"]) == set()
    assert HERE in traced["dropped"]  # type: ignore[operator]  its last report was lost
    assert traced["spawned"] is None  # project code in the actor started a process: opaque


def test_an_actor_killed_in_its_constructor_is_not_waited_for(traced: dict[str, list[str] | None]) -> None:
    """Killing a late worker asked it for its report first, and that call waited behind the
    constructor for the whole drain timeout (30 s): test_worker_group's late-worker and
    port-race tests took 33 s and 38 s under --testmon, 3 s and 12 s without."""
    (seconds,) = traced["killed_constructing_s"]  # type: ignore[misc]
    assert float(seconds) < 10, seconds
    assert HERE in traced["killed_constructing"]  # type: ignore[operator]  no report: its module whole
    # Killing one actor asks only it: not its peer still in its constructor.
    (seconds,) = traced["killed_beside_constructing_s"]  # type: ignore[misc]
    assert float(seconds) < 10, seconds
    assert {"Calc.__init__", "Calc.add"} <= _units(traced["killed_beside_constructing"])  # its last report


def test_the_projects_own_set_up_hook_runs_before_tracing_starts(traced: dict[str, list[str] | None]) -> None:
    # and tracing goes on: every scenario above ran with it
    assert traced["project_hook"] == ["before tracing"]
