"""The run-time reach recorder (remote_select/reach.py) against a real Ray cluster."""

from __future__ import annotations

import functools
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from nemo_rl.algorithms.loss_functions import NLLLoss
from nemo_rl.config import apply_overrides
from testharness.remote_select.reach import ReachRecorder

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
    # tools/py/tests is not a package, so Ray workers could not import this module by name.
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


def test_what_a_fixture_started_is_charged_to_every_test_that_requests_it(
    ray_cluster: Any, recorder: ReachRecorder
) -> None:
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


def test_uninstall_restores_ray(ray_cluster: Any) -> None:
    import ray
    import ray.actor

    before = (ray.put, ray.actor.ActorClass._remote, ray.actor.ActorHandle._actor_method_call)
    rec = ReachRecorder(str(ROOT))
    rec.install()
    assert ray.put is not before[0]
    rec.uninstall()
    assert (ray.put, ray.actor.ActorClass._remote, ray.actor.ActorHandle._actor_method_call) == before


def test_an_import_hook_installed_before_the_recorder_still_sees_ray() -> None:
    # A fresh interpreter: Ray is imported after the recorder is installed. The recorder's
    # finder goes first; a finder of the user's (a profiler's) must still find and wrap `ray`.
    script = f"""
import importlib.abc, sys
sys.path[:0] = [{str(ROOT / "tools" / "py")!r}, {str(ROOT)!r}]
seen = []

class UserHook(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path, target=None):
        if fullname != "ray":
            return None
        later = sys.meta_path[sys.meta_path.index(self) + 1:]
        spec = next(s for f in later if (s := f.find_spec(fullname, path, target)) is not None)
        run = spec.loader.exec_module
        spec.loader.exec_module = lambda module: (run(module), seen.append(module.__name__))
        return spec

sys.meta_path.insert(0, UserHook())
from testharness.remote_select.reach import ReachRecorder
recorder = ReachRecorder({str(ROOT)!r})
recorder.install()
import ray, ray._private.worker
print(seen, ray.put is not ray._private.worker.put)
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["['ray']", "True"], out.stdout  # the user's hook ran, the recorder patched
