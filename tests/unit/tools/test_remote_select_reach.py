"""The run-time reach recorder (remote_select/reach.py) against a real Ray cluster."""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from testharness.remote_select.reach import ReachRecorder

from nemo_rl.algorithms.loss_functions import NLLLoss
from nemo_rl.config import apply_overrides

ROOT = Path(__file__).resolve().parents[3]
HERE = Path(__file__).resolve().relative_to(ROOT).as_posix()
LOSS = "nemo_rl/algorithms/loss_functions.py"
CONFIG = "nemo_rl/config.py"


class Echo:
    def ping(self, value: Any) -> str:
        return type(value).__name__


def _remote_len(value: Any) -> int:
    return len(value)


@pytest.fixture(autouse=True)
def _ship_this_module_by_value() -> None:
    # tests/unit/tools is not a package, so Ray workers could not import this module by name.
    from ray import cloudpickle

    cloudpickle.register_pickle_by_value(sys.modules[__name__])


@pytest.fixture
def recorder() -> Iterator[ReachRecorder]:
    rec = ReachRecorder(str(ROOT))
    rec.install()
    yield rec
    rec.uninstall()


def test_actor_creation_calls_tasks_and_put_are_charged_to_the_owner(ray_cluster: Any, recorder: ReachRecorder) -> None:
    import ray

    recorder.push_test("t::create")
    actor = ray.remote(Echo).remote()
    recorder.pop()
    recorder.push_test("t::call")
    # A project object nested in a container, and a bound method of one, are unpickled there.
    assert ray.get(actor.ping.remote({"loss": [NLLLoss()]})) == "dict"
    recorder.pop()
    recorder.push_test("t::task")
    assert ray.get(ray.remote(_remote_len).remote(ray.put([functools.partial(apply_overrides, {})]))) == 1
    recorder.pop()
    recorder.push_test("t::nothing")
    assert ray.get(actor.ping.remote(3)) == "int"  # the actor's module only
    recorder.pop()
    ray.kill(actor)
    assert recorder.reach_of("t::create", []) == [HERE]
    assert recorder.reach_of("t::call", []) == sorted([HERE, LOSS])
    assert recorder.reach_of("t::task", []) == sorted([HERE, CONFIG])
    assert recorder.reach_of("t::nothing", []) == [HERE]
    assert recorder.reach_of("t::never-ran", []) == []


def test_what_a_fixture_started_is_charged_to_every_test_that_requests_it(ray_cluster: Any, recorder: ReachRecorder) -> None:
    import ray

    recorder.push_test("t::first")
    recorder.push_fixture("worker")  # set up inside the first test that needs it
    actor = ray.remote(Echo).remote()
    recorder.pop()
    recorder.pop()
    ray.kill(actor)
    assert recorder.reach_of("t::first", ["worker"]) == [HERE]
    assert recorder.reach_of("t::second", ["worker", "tmp_path"]) == [HERE]
    assert recorder.reach_of("t::other", ["tmp_path"]) == []


def test_a_process_started_by_the_test_makes_it_opaque(recorder: ReachRecorder) -> None:
    recorder.push_test("t::subprocess")
    subprocess.run([sys.executable, "-c", "pass"], check=True)
    recorder.pop()
    assert recorder.reach_of("t::subprocess", []) is None
    recorder.push_fixture("server")
    subprocess.run([sys.executable, "-c", "pass"], check=True)
    recorder.pop()
    assert recorder.reach_of("t::uses-server", ["server"]) is None
    assert recorder.reach_of("t::plain", []) == []


def test_a_ray_event_outside_any_test_makes_the_whole_session_opaque(ray_cluster: Any, recorder: ReachRecorder) -> None:
    import ray

    subprocess.run([sys.executable, "-c", "pass"], check=True)  # e.g. ldconfig at import: nobody's
    assert recorder.reach_of("t::any", []) == []
    ray.get(ray.put(NLLLoss()))  # an object sent at import time: nobody can say for whom
    assert recorder.reach_of("t::any", []) is None


def test_objects_are_scanned_to_a_bounded_depth_and_third_party_code_is_ignored() -> None:
    rec = ReachRecorder(str(ROOT))
    files: set[str] = set()
    rec._scan([Path("x"), 3, "s", {"k": (None, b"b")}], 4, files, set())
    assert files == set()  # pathlib, builtins: not the project's
    rec._scan(NLLLoss().__call__, 4, files, set())  # a bound method: its function and its object
    assert files == {LOSS}
    deep: Any = NLLLoss()
    for _ in range(10):
        deep = [deep]
    files.clear()
    rec._scan(deep, 4, files, set())
    assert files == set()  # deeper than the bound: not followed (documented limit)


def test_uninstall_restores_ray(ray_cluster: Any) -> None:
    import ray
    import ray.actor

    before = (ray.put, ray.actor.ActorClass._remote, ray.actor.ActorHandle._actor_method_call)
    rec = ReachRecorder(str(ROOT))
    rec.install()
    assert ray.put is not before[0]
    rec.uninstall()
    assert (ray.put, ray.actor.ActorClass._remote, ray.actor.ActorHandle._actor_method_call) == before


# -- traced actors: the per-function reach (worker_trace.py) ---------------------------
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


def _double(x: int) -> int:
    return 2 * x


def _traced_scenarios() -> dict[str, list[str] | None]:
    """Run in a process of its own: Ray must start after the recorder to trace its workers."""
    import ray
    from ray import cloudpickle

    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    rec = ReachRecorder(str(ROOT))
    rec.install()
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
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
    ray.shutdown()
    rec.uninstall()
    return out


@pytest.fixture(scope="module")
def traced() -> dict[str, list[str] | None]:
    code = (
        f"import json, sys; sys.path[:0] = [{str(ROOT / 'tools/py')!r}, {str(Path(__file__).parent)!r}, {str(ROOT)!r}]; "
        "import test_remote_select_reach as t; print('RESULT', json.dumps(t._traced_scenarios()))"
    )
    env = {**os.environ, "RAY_ENABLE_UV_RUN_RUNTIME_ENV": "0"}
    env.pop("RAY_ADDRESS", None)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env, cwd=ROOT)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, proc.stdout[-3000:] + proc.stderr[-3000:]
    return json.loads(lines[-1][len("RESULT "):])  # type: ignore[no-any-return]


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


def test_actors_that_cannot_be_traced_fall_back_to_their_modules(traced: dict[str, list[str] | None]) -> None:
    assert HERE in traced["threaded"]  # type: ignore[operator]  calls may interleave: module granularity
    assert _units(traced["threaded"]) == set()
    assert HERE in traced["dropped"]  # type: ignore[operator]  its last report was lost
    assert traced["spawned"] is None  # project code in the actor started a process: opaque
