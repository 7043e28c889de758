"""The results record tells the truth: interrupts and stop signals, the exit status pytest
really exits with (real pytest-testmon, sharding and xdist in the loop), runs that execute no
test, and metric keys of test files that share a name.

Every run here is a real pytest (or tests/run_unit.sh) subprocess: signals are real signals,
Ray is a real local cluster.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

from testharness import interrupts
from testharness.history import load_history

# Generous: the waits end as soon as the run gets there; on a loaded 2-core machine starting
# pytest (torch and Ray imports) can take minutes.
START_WAIT_S = 300
STOP_WAIT_S = 300

RUN_UNIT = Path(__file__).resolve().parents[2] / "run_unit.sh"

PYPROJECT = """
[tool.testharness]
results_dir = "out"
test_roots = ["tests"]

[tool.pytest.ini_options]
testpaths = ["tests"]
"""

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


def _project(root: Path, files: dict[str, str]) -> Path:
    (root / "pyproject.toml").write_text(PYPROJECT)
    (root / "conftest.py").write_text('pytest_plugins = ["testharness.plugin"]\n')
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def _env(root: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "TESTHARNESS_", "RAY_ADDRESS"))}
    env["STARTED_FILE"] = str(root / "started")
    # Our own Ray session dir (short: Ray's socket paths must fit 107 bytes).
    env["RAY_TMPDIR"] = tempfile.mkdtemp(prefix="rec_ray_", dir="/tmp")
    env["RAY_ENABLE_UV_RUN_RUNTIME_ENV"] = "0"  # Ray workers run this interpreter, not a uv-built copy
    env["TESTHARNESS_ROOT"] = str(root)
    env["TESTHARNESS_NO_DISCOVERY"] = "1"
    return env


def _results(root: Path) -> dict[str, Any]:
    return json.loads((root / "out" / "unit_results.json").read_text())


def _start(cmd: list[str], root: Path, background_job: bool = False) -> subprocess.Popen[str]:
    def interactive_like() -> None:
        # A background job of a non-interactive shell inherits SIGINT ignored (and, under
        # nohup, SIGHUP); a terminal user's pytest does not: reset them whatever runs this
        # test. os.setsid: the run's processes are findable by session.
        signal.signal(signal.SIGHUP, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.SIG_IGN if background_job else signal.SIG_DFL)
        os.setsid()

    return subprocess.Popen(
        cmd, cwd=root, env=_env(root), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
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
    root = _project(tmp_path, {"tests/test_slow.py": SLOW_TESTS})
    proc = _start([sys.executable, "-m", "pytest", "-p", "no:randomly"], root)
    out = _stop_when_started(proc, root, signum, group=False, timeout=START_WAIT_S)
    assert proc.returncode == 2, out
    assert "Traceback" not in out
    assert f"Interrupted: {signum.name}" in out
    doc = _results(root)
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
    root = _project(tmp_path, {"tests/test_slow.py": SLOW_TESTS})
    proc = _start(["bash", str(RUN_UNIT)], root)
    out = _stop_when_started(proc, root, signum, group=group, timeout=START_WAIT_S)
    assert proc.returncode == 2, out
    assert "Traceback" not in out
    assert f"run_unit: interrupted by {signum.name}; results of the tests that ran: " in out
    doc = _results(root)
    assert doc["exit_status"] == 2
    assert doc["tests"]["tests/test_slow.py::test_a"]["outcome"] == "passed"


def test_a_background_job_ignores_sigint_and_is_stopped_by_sigterm(tmp_path: Path) -> None:
    # `cmd &` in a script runs with SIGINT ignored: the run must honour that (and not name
    # SIGINT as what stopped it), and still stop cleanly on SIGTERM.
    root = _project(tmp_path, {"tests/test_slow.py": SLOW_TESTS})
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
    assert _results(root)["exit_status"] == 2


def test_ray_names_its_processes_after_the_driver_that_started_them(tmp_path: Path) -> None:
    # The end-of-run sweep finds a Ray cluster's orphaned workers by this name: check the
    # assumption against real Ray.
    script = (
        "import os, ray, psutil, sys\n"
        "ray.init(num_cpus=1, include_dashboard=False, _node_ip_address='127.0.0.1')\n"
        "sys.path.insert(0, os.environ['HARNESS'])\n"
        "from testharness.interrupts import ray_session_marker\n"
        "marker = ray_session_marker(os.getpid())\n"
        "kids = psutil.Process().children(recursive=True)\n"
        "named = [p.name() for p in kids if any(marker.search(a) for a in p.cmdline())]\n"
        "other = ray_session_marker(os.getpid() + 1)\n"
        "assert not any(other.search(a) for p in kids for a in p.cmdline())\n"
        "print(sorted(set(named)))\n"
        "ray.shutdown()\n"
    )
    env = _env(tmp_path)
    env["HARNESS"] = str(Path(interrupts.__file__).parents[1])
    proc = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    names = proc.stdout.strip().splitlines()[-1]
    assert "raylet" in names and "gcs_server" in names, names


@pytest.mark.parametrize("where", ["in_fixture", "in_body"])
def test_sigterm_stops_a_run_with_ray_and_leaves_no_process(tmp_path: Path, where: str) -> None:
    # ray.init() installs its own SIGTERM handler (sys.exit): the harness must still turn
    # SIGTERM into an interruption, and nothing of the local Ray cluster may survive the run.
    root = _project(tmp_path, {"tests/test_ray.py": RAY_TESTS})
    proc = _start([sys.executable, "-m", "pytest", f"tests/test_ray.py::test_{where}"], root)
    out = _stop_when_started(proc, root, signal.SIGTERM, group=False, timeout=START_WAIT_S + 90)
    # Started in the body, Ray's handler is the one SIGTERM meets; the run still ends as an
    # interruption, but Ray's native threads abort the interpreter's exit (SIGABRT, seen
    # without the harness too): the record says 2, the process cannot.
    assert proc.returncode == 2 or (where == "in_body" and proc.returncode == -signal.SIGABRT), out
    assert "Traceback" not in out and "Interrupted: SIGTERM" in out
    assert _results(root)["exit_status"] == 2
    assert _results(root)["tests"][f"tests/test_ray.py::test_{where}"]["outcome"] in ("error", "failed")
    assert _left_in_session(proc.pid, wait_s=5) == []


def test_repeated_signals_count_once_then_insist() -> None:
    policy = interrupts.SignalPolicy()
    assert policy.on_signal(signal.SIGINT, 10.0) == interrupts.INTERRUPT
    assert policy.on_signal(signal.SIGINT, 10.2) == interrupts.IGNORE  # one Ctrl-C, delivered twice
    assert policy.on_signal(signal.SIGTERM, 15.0) == interrupts.NOTE
    assert policy.on_signal(signal.SIGTERM, 20.0) == interrupts.FORCE


# --- the recorded exit status is the one pytest exits with -----------------------------------


def _pytest(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:randomly", *args], cwd=root, env=_env(root),
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip


QUICK_TESTS = {
    "tests/test_one.py": "def test_one(tracker):\n    tracker.track('v', 1)\n",
    "tests/test_two.py": "def test_two(tracker):\n    tracker.track('v', 2)\n",
}


@pytest.mark.parametrize("xdist", [[], ["-n", "2"]], ids=["serial", "xdist"])
def test_testmon_with_nothing_to_run_is_recorded_as_exit_0(tmp_path: Path, xdist: list[str]) -> None:
    root = _project(tmp_path, QUICK_TESTS)
    first = _pytest(root, "--testmon", *xdist)
    assert first.returncode == 0, first.stdout + first.stderr
    assert _results(root)["exit_status"] == 0
    again = _pytest(root, "--testmon", *xdist)  # nothing changed: testmon deselects everything
    assert again.returncode == 0, again.stdout + again.stderr
    doc = _results(root)
    assert doc["exit_status"] == 0 and doc["tests"] == {}


def test_an_empty_shard_is_recorded_as_exit_0(tmp_path: Path) -> None:
    root = _project(tmp_path, QUICK_TESTS)
    proc = _pytest(root, "--shard", "3/3")  # two tests, three shards: the third is empty
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert _results(root)["exit_status"] == 0


def test_xdist_controller_writes_one_record_with_the_workers_metrics(tmp_path: Path) -> None:
    root = _project(tmp_path, {**QUICK_TESTS, "tests/test_bad.py": "def test_bad():\n    assert False\n"})
    proc = _pytest(root, "-n", "2")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    doc = _results(root)
    assert doc["exit_status"] == 1
    assert {k: v["outcome"] for k, v in doc["tests"].items()} == {
        "tests/test_one.py::test_one": "passed", "tests/test_two.py::test_two": "passed",
        "tests/test_bad.py::test_bad": "failed",
    }  # fmt: skip
    assert doc["metrics"]["test_one::test_one"]["v"] == 1 and doc["metrics"]["test_two::test_two"]["v"] == 2
    assert len(list((root / "out" / "unit_results").glob("*.json"))) == 1


# --- runs that execute no test leave no record ----------------------------------------------


@pytest.mark.parametrize(
    "args",
    [["--collect-only"], ["--shard", "1/2", "--shard-plan"], ["--help"]],
    ids=["collect-only", "shard-plan", "help"],
)
def test_runs_that_execute_no_test_write_no_results(tmp_path: Path, args: list[str]) -> None:
    root = _project(tmp_path, QUICK_TESTS)
    proc = _pytest(root, *args)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert not (root / "out").exists()


def test_history_ignores_records_of_runs_without_tests(tmp_path: Path) -> None:
    dated = tmp_path / "unit_results"
    dated.mkdir()
    base = {"exit_status": 0, "git_commit": "x", "start_time": "2026-01-01 00:00:00", "metrics": {}}
    (dated / "empty.json").write_text(json.dumps({**base, "tests": {}}))
    (dated / "real.json").write_text(json.dumps({**base, "tests": {"t.py::t": {"outcome": "passed", "duration": 1.0}}}))
    history = load_history(dated)
    assert [r.path.name for r in history.runs] == ["real.json"]
    assert history.warnings == []


# --- metric keys ------------------------------------------------------------------------------


def test_test_files_sharing_a_name_get_distinct_stable_keys(tmp_path: Path) -> None:
    root = _project(tmp_path, {
        "tests/a/test_x.py": "def test(tracker):\n    tracker.track('v', 'a')\n",
        "tests/b/test_x.py": "def test(tracker):\n    tracker.track('v', 'b')\n",
        "tests/test_y.py": "def test(tracker):\n    tracker.track('v', 'y')\n",
    })  # fmt: skip
    for d in ("tests/a", "tests/b"):
        (root / d / "__init__.py").write_text("")  # two modules named test_x need packages
    proc = _pytest(root)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    metrics = _results(root)["metrics"]
    assert {k: v["v"] for k, v in metrics.items()} == {
        "tests/a/test_x::test": "a",
        "tests/b/test_x::test": "b",
        "test_y::test": "y",
    }
    only_a = _pytest(root, "tests/a/test_x.py")  # the key does not depend on what a run selects
    assert only_a.returncode == 0
    assert list(_results(root)["metrics"]) == ["tests/a/test_x::test"]
