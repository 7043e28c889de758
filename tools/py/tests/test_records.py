"""The results record tells the truth after interrupts and stop signals. The exit status
pytest really exits with, runs that execute no test and metric keys: test_records_exit_status.py.

Every run here is a real pytest (or tests/run_unit.sh) subprocess: signals are real signals,
Ray is a real local cluster.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from records_project import read_results, run_env, write_project

from testharness import interrupts

# Generous: the waits end as soon as the run gets there; on a loaded 2-core machine starting
# pytest (torch and Ray imports) can take minutes.
START_WAIT_S = 300
STOP_WAIT_S = 300

RUN_UNIT = Path(__file__).resolve().parents[3] / "tests" / "run_unit.sh"  # this repository's

# test_a passes; test_b announces that it runs (a file) and then waits to be stopped.
SLOW_TESTS = """
import os, time
from pathlib import Path

def test_a(tracker):
    tracker.track("v", 1)

def test_b(tracker):
    tracker.track("v", 2)
    Path(os.environ["STARTED_FILE"]).touch()
    time.sleep(120)
"""

# Ray started by a fixture (ray.init then replaces SIGTERM's handler) or in the test body.
RAY_TESTS = """
import os, time
from pathlib import Path
import pytest
import ray

def _start():
    ray.init(num_cpus=1, include_dashboard=False, _node_ip_address="127.0.0.1")

@pytest.fixture
def cluster():
    _start()
    yield
    ray.shutdown()

@ray.remote
class Sleeper:
    def ping(self):
        return 1

def test_in_fixture(cluster):
    a = Sleeper.remote()
    ray.get(a.ping.remote())
    Path(os.environ["STARTED_FILE"]).touch()
    time.sleep(120)

def test_in_body():
    _start()
    try:
        a = Sleeper.remote()
        ray.get(a.ping.remote())
        Path(os.environ["STARTED_FILE"]).touch()
        time.sleep(120)
    finally:
        ray.shutdown()
"""


def _start(cmd: list[str], root: Path, background_job: bool = False) -> subprocess.Popen[str]:
    def interactive_like() -> None:
        # A background job of a non-interactive shell inherits SIGINT ignored (and, under
        # nohup, SIGHUP); a terminal user's pytest does not: reset them whatever runs this
        # test. os.setsid: the run's processes are findable by session.
        signal.signal(signal.SIGHUP, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.SIG_IGN if background_job else signal.SIG_DFL)
        os.setsid()

    return subprocess.Popen(
        cmd, cwd=root, env=run_env(root), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        preexec_fn=interactive_like,
    )  # fmt: skip


def _wait_until_started(proc: subprocess.Popen[str], root: Path, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not (root / "started").exists():
        assert proc.poll() is None, f"the run ended before the test started:\n{proc.communicate()[0]}"
        assert time.monotonic() < deadline, "the slow test did not start in time"
        time.sleep(0.1)


def _stop_when_started(proc: subprocess.Popen[str], root: Path, signum: int, group: bool, timeout: float) -> str:
    try:
        _wait_until_started(proc, root, timeout)
        if group:
            os.killpg(proc.pid, signum)  # like Ctrl-C in a terminal: every process of the group
        else:
            proc.send_signal(signum)  # like `timeout`, `kill`, a CI cancel
        out, _ = proc.communicate(timeout=STOP_WAIT_S)
        return out
    finally:
        if proc.poll() is None:  # a failed assertion above: do not leave the run behind
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def _left_in_session(sid: int, wait_s: float) -> list[str]:
    """Processes of session `sid` still alive `wait_s` seconds from now (at most)."""
    deadline = time.monotonic() + wait_s
    while True:
        left = []
        for proc in psutil.process_iter(["pid", "name"]):
            try:
                if os.getsid(proc.pid) == sid:
                    left.append(f"{proc.info['name']} ({proc.pid})")
            except (ProcessLookupError, PermissionError):
                continue
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.2)


# --- signals --------------------------------------------------------------------------------


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP], ids=lambda s: s.name)
def test_a_stop_signal_to_pytest_ends_like_ctrl_c_with_results(tmp_path: Path, signum: signal.Signals) -> None:
    root = write_project(tmp_path, {"tests/test_slow.py": SLOW_TESTS})
    proc = _start([sys.executable, "-m", "pytest", "-p", "no:randomly"], root)
    out = _stop_when_started(proc, root, signum, group=False, timeout=START_WAIT_S)
    assert proc.returncode == 2, out
    assert "Traceback" not in out
    assert f"Interrupted: {signum.name}" in out
    doc = read_results(root)
    assert doc["exit_status"] == 2
    outcomes = {k: v["outcome"] for k, v in doc["tests"].items()}
    assert outcomes == {"tests/test_slow.py::test_a": "passed", "tests/test_slow.py::test_b": "error"}
    assert doc["metrics"]["test_slow::test_b"]["v"] == 2  # what the cut-short test tracked
    assert len(list((root / "out" / "unit_results").glob("*.json"))) == 1


@pytest.mark.parametrize(
    ("signum", "group"), [(signal.SIGTERM, False), (signal.SIGINT, True), (signal.SIGHUP, False)],
    ids=["SIGTERM-to-the-script", "SIGINT-to-the-group", "SIGHUP-to-the-script"],
)  # fmt: skip
def test_a_stop_signal_through_run_unit_sh(tmp_path: Path, signum: signal.Signals, group: bool) -> None:
    # To the group, pytest gets the signal twice (from the "terminal" and forwarded by the
    # script): still one interruption, and the results are written.
    root = write_project(tmp_path, {"tests/test_slow.py": SLOW_TESTS})
    proc = _start(["bash", str(RUN_UNIT)], root)
    out = _stop_when_started(proc, root, signum, group=group, timeout=START_WAIT_S)
    assert proc.returncode == 2, out
    assert "Traceback" not in out
    assert f"run_unit: interrupted by {signum.name}; results of the tests that ran: " in out
    doc = read_results(root)
    assert doc["exit_status"] == 2
    assert doc["tests"]["tests/test_slow.py::test_a"]["outcome"] == "passed"


def test_a_background_job_ignores_sigint_and_is_stopped_by_sigterm(tmp_path: Path) -> None:
    # `cmd &` in a script runs with SIGINT ignored: the run must honour that (and not name
    # SIGINT as what stopped it), and still stop cleanly on SIGTERM.
    root = write_project(tmp_path, {"tests/test_slow.py": SLOW_TESTS})
    proc = _start(["bash", str(RUN_UNIT)], root, background_job=True)
    try:
        _wait_until_started(proc, root, START_WAIT_S)
        os.killpg(proc.pid, signal.SIGINT)
        time.sleep(2)
        assert proc.poll() is None, "SIGINT stopped a run that ignores it"
    except BaseException:
        os.killpg(proc.pid, signal.SIGKILL)
        raise
    out = _stop_when_started(proc, root, signal.SIGTERM, group=False, timeout=START_WAIT_S)
    assert proc.returncode == 2, out
    assert "run_unit: interrupted by SIGTERM; results of the tests that ran: " in out
    assert read_results(root)["exit_status"] == 2


def test_ray_names_its_processes_after_the_driver_that_started_them(tmp_path: Path) -> None:
    # The end-of-run sweep finds a Ray cluster's orphaned workers by this name: check the
    # assumption against real Ray.
    script = (
        "import os, ray, psutil, sys\n"
        "ray.init(num_cpus=1, include_dashboard=False, _node_ip_address='127.0.0.1')\n"
        "sys.path.insert(0, os.environ['HARNESS'])\n"
        "from testharness.process_sweep import ray_session_marker\n"
        "marker = ray_session_marker(os.getpid())\n"
        "kids = psutil.Process().children(recursive=True)\n"
        "named = [p.name() for p in kids if any(marker.search(a) for a in p.cmdline())]\n"
        "other = ray_session_marker(os.getpid() + 1)\n"
        "assert not any(other.search(a) for p in kids for a in p.cmdline())\n"
        "print(sorted(set(named)))\n"
        "ray.shutdown()\n"
    )
    env = run_env(tmp_path)
    env["HARNESS"] = str(Path(interrupts.__file__).parents[1])
    proc = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    names = proc.stdout.strip().splitlines()[-1]
    assert "raylet" in names and "gcs_server" in names, names


@pytest.mark.parametrize("where", ["in_fixture", "in_body"])
def test_sigterm_stops_a_run_with_ray_and_leaves_no_process(tmp_path: Path, where: str) -> None:
    # ray.init() installs its own SIGTERM handler (sys.exit): the harness must still turn
    # SIGTERM into an interruption, and nothing of the local Ray cluster may survive the run.
    root = write_project(tmp_path, {"tests/test_ray.py": RAY_TESTS})
    proc = _start([sys.executable, "-m", "pytest", f"tests/test_ray.py::test_{where}"], root)
    out = _stop_when_started(proc, root, signal.SIGTERM, group=False, timeout=START_WAIT_S + 90)
    # Started in the body, Ray's handler is the one SIGTERM meets; the run still ends as an
    # interruption, but Ray's native threads abort the interpreter's exit (SIGABRT, seen
    # without the harness too): the record says 2, the process cannot.
    assert proc.returncode == 2 or (where == "in_body" and proc.returncode == -signal.SIGABRT), out
    assert "Traceback" not in out and "Interrupted: SIGTERM" in out
    assert read_results(root)["exit_status"] == 2
    assert read_results(root)["tests"][f"tests/test_ray.py::test_{where}"]["outcome"] in ("error", "failed")
    assert _left_in_session(proc.pid, wait_s=5) == []


def test_repeated_signals_count_once_then_insist() -> None:
    policy = interrupts.SignalPolicy()
    assert policy.on_signal(signal.SIGINT, 10.0) == interrupts.INTERRUPT
    assert policy.on_signal(signal.SIGINT, 10.2) == interrupts.IGNORE  # one Ctrl-C, delivered twice
    assert policy.on_signal(signal.SIGTERM, 15.0) == interrupts.NOTE
    assert policy.on_signal(signal.SIGTERM, 20.0) == interrupts.FORCE
