"""testharness.hygiene with pytester: a leaked process (no Ray), and real Ray on CPU: a leaked
actor named by its class, a module fixture's actor that is no leak, and hangs in actor methods
(sleeping; a gloo all_reduce that one rank never joins) failing with method, file and line.
The GPU case skips without a GPU. The pure core is tested in test_hygiene_core.py."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest

from testharness import gpu


def _titles() -> list[str]:
    titles = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                titles.append(Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace"))
            except OSError:
                pass
    return titles


def test_a_leaked_child_process_is_recorded_summarised_and_an_error_with_fail_on_leak(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytester.makepyprojecttoml("[tool.testharness.hygiene]\nsettle_s = 0.5\n")  # the leak never ends
    pid_file = pytester.path / "pids"
    monkeypatch.setenv("HYGIENE_PID_FILE", str(pid_file))
    pytester.makepyfile(
        test_child="""
import os, subprocess, sys

def test_leaks_a_process():
    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    with open(os.environ["HYGIENE_PID_FILE"], "a") as fh:
        fh.write(f"{p.pid}\\n")

def test_waits_for_its_process():
    subprocess.run([sys.executable, "-c", "pass"], check=True)
"""
    )
    try:
        result = pytester.runpytest("-p", "no:cacheprovider", "--unit-results-dir", "out")
        result.assert_outcomes(passed=2)
        result.stdout.fnmatch_lines(
            [
                "*= leaks: 1 test(s) left resources behind =*",
                "test_child.py::test_leaks_a_process: 1 leak(s)",
                "    process *python* -c import time; time.sleep(600) (pid *)",
                "(--fail-on-leak*",
            ]
        )
        tests = json.loads((pytester.path / "out" / "unit_results.json").read_text())["tests"]
        (leak,) = tests["test_child.py::test_leaks_a_process"]["leaks"]
        assert leak["kind"] == "process" and leak["detail"].startswith("pid ")
        assert "leaks" not in tests["test_child.py::test_waits_for_its_process"]

        result = pytester.runpytest("-p", "no:cacheprovider", "--fail-on-leak", "--unit-results-dir", "out")
        result.assert_outcomes(passed=2, errors=1)
        result.stdout.fnmatch_lines(
            ["*ERROR at teardown of test_leaks_a_process*", "leaked 1 resource(s) after teardown: process *"]
        )
    finally:
        _kill_pids(pid_file)


def _kill_pids(pid_file: Path) -> None:
    """The processes a scenario wrote to `pid_file`: never left behind by a failed assertion."""
    for pid in pid_file.read_text().split() if pid_file.exists() else []:
        try:
            os.kill(int(pid), signal.SIGKILL)
            os.waitpid(int(pid), 0)
        except OSError:
            pass


CONFTEST = '''\
import os

import pytest

os.environ.setdefault("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")
os.environ.setdefault("RAY_worker_niceness", "0")


@pytest.fixture(scope="session")
def ray_session():
    import ray

    ray.init(num_cpus=4, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


@pytest.fixture(scope="module")
def module_actor(ray_session):
    """A module fixture's actor: alive across tests, ended at the module's end: no leak."""
    import ray

    from helpers import Keeper

    actor = Keeper.remote()
    ray.get(actor.ping.remote())
    yield actor
    ray.kill(actor)
'''

HELPERS = """\
import os
import socket
import time

import ray


@ray.remote(num_cpus=0)
class Keeper:
    def ping(self):
        return os.getpid()


@ray.remote(num_cpus=0)
class LeakyActor:
    def ping(self):
        return os.getpid()


@ray.remote(num_cpus=0)
class Sleeper:
    def nap(self):
        time.sleep(3600)  # STUCK-SLEEP
        return 1


@ray.remote(num_cpus=0)
class Rank:
    def __init__(self, rank, port):
        import torch.distributed as dist

        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)

    def all_reduce(self):
        import torch
        import torch.distributed as dist

        t = torch.ones(1)
        dist.all_reduce(t)  # STUCK-COLLECTIVE
        return t.item()

    def skip(self):
        return True


@ray.remote(num_cpus=0)
def stuck_task():
    time.sleep(3600)  # STUCK-TASK


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
"""

SCENARIOS = """\
import os
import time

import pytest
import ray
from ray.util.placement_group import placement_group, remove_placement_group

from helpers import LeakyActor, Rank, Sleeper, free_port, stuck_task

KEEP = []


def test_leaks_an_actor(ray_session):
    actor = LeakyActor.remote()
    ray.get(actor.ping.remote())
    KEEP.append(actor)  # never killed: alive after teardown
    KEEP.append(placement_group([{"CPU": 0.1}], name="leaky_pg"))  # never removed


def test_cleans_up(ray_session, module_actor):
    actor = LeakyActor.remote()
    ray.get([actor.ping.remote(), module_actor.ping.remote()])
    ray.kill(actor)
    group = placement_group([{"CPU": 0.1}])
    ray.get(group.ready())
    remove_placement_group(group)


def test_uses_the_module_actor(module_actor):
    ray.get(module_actor.ping.remote())


@pytest.mark.timeout(15)
def test_hangs_sleeping(ray_session):
    ray.get(Sleeper.remote().nap.remote())


@pytest.mark.timeout(60)
def test_hangs_in_a_collective(ray_session):
    port = free_port()
    ranks = [Rank.remote(r, port) for r in range(2)]
    ray.get([ranks[0].all_reduce.remote(), ranks[1].skip.remote()])  # rank 1 never joins


@pytest.mark.timeout(15)
def test_hangs_in_a_task(ray_session):
    ray.get(stuck_task.remote())  # cancelled at the timeout (a killed worker would be retried)


def test_nothing_of_the_hung_tests_is_left(ray_session):
    from ray._private import state

    job = ray.get_runtime_context().get_job_id()
    alive = [a["ActorClassName"] for a in state.actors(job_id=ray.JobID.from_hex(job)).values() if a["State"] != "DEAD"]
    assert not {"Sleeper", "Rank"} & set(alive), alive
    titles = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                titles.append(open(f"/proc/{pid}/cmdline", "rb").read().decode(errors="replace"))
            except OSError:
                pass
    assert not [t for t in titles if t.startswith(("ray::Sleeper", "ray::Rank", "ray::stuck_task"))]
"""


def _line_of(marker: str) -> int:
    return next(i for i, line in enumerate(HELPERS.splitlines(), 1) if marker in line)


@pytest.mark.timeout(900)
def test_real_ray_a_leaked_actor_is_named_and_hung_actor_methods_fail_with_their_line(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A cluster of its own (its conftest sizes it), not the one an `-n` run shares; and no
    # GPU memory check: under `-n` on a GPU machine the other workers' tests use the GPU
    # meanwhile (the leak check reads whole devices), and these scenarios use none.
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    pytester.makepyprojecttoml("[tool.testharness.hygiene]\ngpu_threshold_mib = 1e9\n")
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(helpers=HELPERS, test_scenarios=SCENARIOS)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-rA", "--unit-results-dir", "out", timeout=840)
    tests = json.loads((pytester.path / "out" / "unit_results.json").read_text())["tests"]
    out = result.stdout.str()

    leaks = tests["test_scenarios.py::test_leaks_an_actor"]["leaks"]
    assert [(x["kind"], x["what"]) for x in leaks] == [("actor", "LeakyActor"), ("placement_group", "'leaky_pg'")], out
    for clean in ("test_cleans_up", "test_uses_the_module_actor", "test_nothing_of_the_hung_tests_is_left"):
        assert tests[f"test_scenarios.py::{clean}"]["outcome"] == "passed", out
        assert "leaks" not in tests[f"test_scenarios.py::{clean}"], out  # a module fixture's actor is no leak
    result.stdout.fnmatch_lines(["*= leaks: 1 test(s) left resources behind =*", "    actor LeakyActor (id *"])

    cases = {
        "test_hangs_sleeping": (15, "actor Sleeper.nap", _line_of("STUCK-SLEEP")),
        "test_hangs_in_a_collective": (60, "actor Rank.all_reduce", _line_of("STUCK-COLLECTIVE")),
        "test_hangs_in_a_task": (15, "task stuck_task", _line_of("STUCK-TASK")),
    }
    for name, (timeout, where, line) in cases.items():
        rec = tests[f"test_scenarios.py::{name}"]
        reason = f"Timeout: the test ran over {timeout} s; {where} at helpers.py:{line}"
        assert rec["outcome"] == "failed" and rec["hang"]["reason"].startswith(reason), out
        assert rec["duration"] <= timeout + 30, rec["duration"]
        assert rec["hang"]["stuck"][0] == {"where": where, "file": "helpers.py", "line": line}
        assert any(where.split()[1].split(".")[0] in s["stack"] for s in rec["hang"]["stacks"])
        result.stdout.fnmatch_lines([f"*{reason}*"])  # the failure's one line
    assert (
        "in all_reduce, torch/distributed/distributed_c10d.py:"
        in tests["test_scenarios.py::test_hangs_in_a_collective"]["hang"]["reason"]
    )
    # no process of the hung tests is left: killed at the timeout (checked inside the run), gone after it
    deadline = time.monotonic() + 30
    hung = ("ray::Sleeper", "ray::Rank", "ray::LeakyActor", "ray::stuck_task")
    while (left := [t for t in _titles() if t.startswith(hung)]) and (time.monotonic() < deadline):
        time.sleep(1)
    assert not left


@pytest.mark.skipif(gpu.local_gpu_count() == 0, reason="needs a GPU (NVML sees none); run it on a GPU machine")
@pytest.mark.timeout(600)
@pytest.mark.uses_cuda  # CUDA in its child; under -n no other test's actor changes the memory it reads
def test_a_test_that_leaks_gpu_memory_is_named(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_gpu="""
import torch

HELD = []
GIB = 2**30

def test_holds_gpu_memory():
    HELD.append(torch.empty(2 * GIB, dtype=torch.uint8, device="cuda"))
    torch.cuda.synchronize()

def test_frees_its_gpu_memory():
    block = torch.empty(2 * GIB, dtype=torch.uint8, device="cuda")
    torch.cuda.synchronize()
    del block
    torch.cuda.empty_cache()
"""
    )
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--unit-results-dir", "out", timeout=540)
    result.assert_outcomes(passed=2)
    tests = json.loads((pytester.path / "out" / "unit_results.json").read_text())["tests"]
    (leak,) = tests["test_gpu.py::test_holds_gpu_memory"]["leaks"]
    assert leak["kind"] == "gpu_memory" and leak["what"].startswith("GPU local:"), leak
    grew = float(leak["detail"].split()[0].lstrip("+"))
    assert grew >= 2048, leak
    assert "leaks" not in tests["test_gpu.py::test_frees_its_gpu_memory"]
    result.stdout.fnmatch_lines(["test_gpu.py::test_holds_gpu_memory: 1 leak(s)", "    gpu memory GPU local:*"])


def test_a_test_hung_in_its_own_process_fails_at_its_timeout_naming_its_line(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_slow="""
import time
import pytest

@pytest.mark.timeout(1)
def test_sleeps():
    time.sleep(120)

def test_next():
    pass
"""
    )
    start = time.monotonic()
    result = pytester.runpytest("-p", "no:cacheprovider", "--unit-results-dir", "out")
    assert time.monotonic() - start < 30
    result.assert_outcomes(failed=1, passed=1)
    reason = "Timeout: the test ran over 1 s; no Ray actor was busy; test process at test_slow.py:6"
    result.stdout.fnmatch_lines([f"{reason}*"])
    hung = json.loads((pytester.path / "out" / "unit_results.json").read_text())["tests"]["test_slow.py::test_sleeps"]
    assert hung["hang"]["reason"].startswith(reason) and hung["hang"]["stacks"][0]["process"].startswith("test process")


def test_a_module_fixtures_process_is_charged_when_its_scope_ends(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytester.makepyprojecttoml("[tool.testharness.hygiene]\nsettle_s = 0.5\n")
    pid_file = pytester.path / "pids"
    monkeypatch.setenv("HYGIENE_PID_FILE", str(pid_file))
    pytester.makepyfile(
        test_fixture="""
import os, subprocess, sys
import pytest

@pytest.fixture(scope="module")
def server():
    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    with open(os.environ["HYGIENE_PID_FILE"], "a") as fh:
        fh.write(f"{p.pid}\\n")
    yield p  # never stopped

def test_first(server):
    assert server.poll() is None

def test_last(server):
    assert server.poll() is None
"""
    )
    try:
        result = pytester.runpytest("-p", "no:cacheprovider", "--unit-results-dir", "out")
        result.assert_outcomes(passed=2)
        tests = json.loads((pytester.path / "out" / "unit_results.json").read_text())["tests"]
        assert "leaks" not in tests["test_fixture.py::test_first"]  # alive while its scope lasts
        (leak,) = tests["test_fixture.py::test_last"]["leaks"]
        assert leak["kind"] == "process" and leak["owner"] == "module fixture 'server'"
        result.stdout.fnmatch_lines(["    process * (pid *) ?module fixture 'server'?"])  # [ ] are fnmatch classes
    finally:
        _kill_pids(pid_file)
