"""Never a false "all passed", never a hung run (issue 49): run_unit's exit code and last line
are the worse of what pytest returned, what its session recorded and how far its journal got;
a pytest that outlives its session is ended; none outlives its supervisor; nothing a crashed
round started is left behind.

Every run is tests/run_unit.sh on a throwaway project, with the real thing: a real atexit
handler calling os._exit, a real non-daemon thread, a real SIGKILL of the supervisor, real
segfaults (ctypes.string_at(0)), real signals, real pytest-rerunfailures and pytest-xdist.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import uuid
from pathlib import Path

import pytest
from records_project import RUN_UNIT, joining_under_xdist, read_results, run_env, run_unit_sh, write_project

from testharness.exit_codes import INTERNAL_ERROR, worse
from testharness.supervisor import reconcile

DONE_WITHIN_S = 60  # the bound on every reproduction


def _marked(mark: str) -> list[str]:
    """Live processes (pid: command) whose environment carries `mark`: what the run left behind."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if mark.encode() not in Path(f"/proc/{pid}/environ").read_bytes():
                continue
            status = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
            command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if status != "Z":
            found.append(f"{pid}: {command[:100]}")
    return found


def _run(root: Path, *args: str, mark: str = "", **env: str) -> tuple[subprocess.CompletedProcess[str], str, list[str]]:
    """run_unit.sh within the bound; (the process, its last line, what it left behind)."""
    mark = mark or f"LEFTOVER_MARK_{uuid.uuid4().hex}"
    proc = run_unit_sh(root, *args, timeout=DONE_WITHIN_S, LEFTOVER_MARK=mark, **env)
    closing = proc.stderr if proc.returncode else proc.stdout  # run_unit's last line: stdout when it passed
    return proc, (closing.strip().splitlines() or [""])[-1], _marked(mark)


def _dated(root: Path) -> list[Path]:
    return sorted((root / "out" / "unit_results").glob("*.json"))


def _outcomes(root: Path) -> dict[str, str]:
    return {k.rpartition("::")[2]: v["outcome"] for k, v in read_results(root)["tests"].items()}


# --- the decision, pure ---------------------------------------------------------------------------


def test_worse_orders_exit_codes_by_how_bad_they_are() -> None:
    assert worse(0, 1) == 1 and worse(1, 0) == 1
    assert worse(5, 0) == 5 and worse(1, 5) == 1
    assert worse(2, 1) == 2 and worse(3, 4) == 3
    assert worse(-11, 3) == -11  # a signal is worse than anything pytest returns


def test_reconcile_never_takes_a_better_code_than_the_session_recorded() -> None:
    assert reconcile(0, 0, 0, ended_late=False) == (0, None)
    status, why = reconcile(0, 1, 1, ended_late=False)  # atexit: os._exit(0) after a failed session
    assert status == 1 and why is not None and "after its session ended with 1" in why
    status, why = reconcile(1, None, 0, ended_late=False)  # an exception out of pytest's main
    assert status == INTERNAL_ERROR and why is not None and "died after its session ended" in why
    status, why = reconcile(-11, 0, 0, ended_late=False)  # a segfault at exit
    assert status == INTERNAL_ERROR and why is not None and "SIGSEGV" in why
    assert reconcile(-9, 0, 0, ended_late=True) == (0, None)  # we ended it late: its record stands


# --- 1. never a false "all selected tests passed" ---------------------------------------------------

ATEXIT = """
import atexit, os

def test_registers_an_exit():
    atexit.register(lambda: os._exit(0))

def test_fails():
    assert False
"""


def test_an_atexit_os_exit_0_after_a_failure_does_not_pass_the_run(tmp_path: Path) -> None:
    root = write_project(tmp_path, {"tests/test_a.py": ATEXIT})
    proc, last, left = _run(root)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert last == "run_unit: FAILED: some tests failed (see the summary above)"
    assert "pytest's process exited with 0 after its session ended with 1" in proc.stderr
    assert read_results(root)["exit_status"] == 1 and not left


@pytest.mark.parametrize(
    ("conftest", "how"),
    [
        ("import os\nos._exit(0)\n", "it exited with code 0"),
        ("import ctypes\nctypes.string_at(0)\n", "killed by SIGSEGV"),
    ],
    ids=["os._exit(0)", "segfault"],
)
def test_a_conftest_that_ends_pytest_at_import_ends_the_run_with_3(tmp_path: Path, conftest: str, how: str) -> None:
    root = write_project(tmp_path, {"tests/conftest.py": conftest, "tests/test_a.py": "def test_a():\n    pass\n"})
    proc, last, left = _run(root)
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert last.startswith("run_unit: FAILED: pytest died before its tests were collected"), last
    assert how in last
    if how == "killed by SIGSEGV":  # and its stack, although pytest's faulthandler had not started
        assert last.endswith("(killed by SIGSEGV: Segmentation fault)")
        assert 'tests/conftest.py", line 2 in <module>' in proc.stderr
    assert not (root / "out" / "unit_results.json").exists() and not left


# --- 2. a pytest that outlives its session --------------------------------------------------------

THREAD = """
import threading, time

def test_starts_a_thread():
    threading.Thread(target=lambda: time.sleep(1e5), name="sleeps-forever").start()

def test_b():
    pass
"""


def test_a_thread_left_running_is_named_and_pytest_ended_as_recorded(tmp_path: Path) -> None:
    root = write_project(tmp_path, {"tests/test_a.py": THREAD})
    started = time.monotonic()
    proc, last, left = _run(root)
    took = time.monotonic() - started
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert last == "run_unit: all selected tests passed"
    assert "has not exited 20 s after its main returned: the thread(s) it waits for: sleeps-forever;" in proc.stderr
    assert "test_a.py" in proc.stderr  # its stack: where it waits (py-spy's, else faulthandler's)
    assert "the run's result stands as its record says" in proc.stderr
    assert read_results(root)["exit_status"] == 0 and not left
    print(f"a run whose thread never ends: {took:.1f} s")


# --- 3. pytest dies with its supervisor -------------------------------------------------------------

KILLS_SUPERVISOR = """
import os, signal, time

def test_kills_its_supervisor():
    os.kill(os.getppid(), signal.SIGKILL)
    time.sleep(3)

def test_b():
    time.sleep(3)
"""


def test_pytest_dies_with_its_supervisor_and_writes_no_record_later(tmp_path: Path) -> None:
    root = write_project(tmp_path, {"tests/test_a.py": KILLS_SUPERVISOR})
    mark = f"LEFTOVER_MARK_{uuid.uuid4().hex}"
    proc, _last, _left = _run(root, mark=mark)
    assert proc.returncode == -signal.SIGKILL, proc.stdout + proc.stderr  # bash exec'd the supervisor
    deadline = time.monotonic() + DONE_WITHIN_S  # its pytest goes with it (an orphan would run both tests, 6 s)
    while left := _marked(mark):
        assert time.monotonic() < deadline, f"pytest outlived its supervisor: {left}"
        time.sleep(0.1)
    assert not (root / "out" / "unit_results.json").exists()  # ... and wrote nothing on its way out
    assert not _dated(root)


def test_a_record_is_not_written_by_a_pytest_whose_supervisor_is_gone(tmp_path: Path) -> None:
    # Where no parent-death signal stands in (not Linux), a pytest whose supervisor died before
    # it started is no longer its child: it is not bound to the run (testharness.run_binding),
    # and one that loses its supervisor later asks whether it still lives before it writes.
    root = write_project(tmp_path, {"tests/test_a.py": "def test_a():\n    pass\n"})
    gone = subprocess.Popen(["true"])
    gone.wait()
    env = {**run_env(root), "TESTHARNESS_SUPERVISOR_PID": str(gone.pid)}
    proc = subprocess.run(["python", "-m", "pytest", "-p", "no:randomly", "-p", "no:cacheprovider"],
                          cwd=root, env=env, capture_output=True, text=True, timeout=DONE_WITHIN_S)  # fmt: skip
    assert "it writes no record there" in proc.stderr, proc.stdout + proc.stderr
    assert not (root / "out" / "unit_results.json").exists()


# --- 4. what a crashed round started is ended and named ---------------------------------------------

SLEEPER = """
import ctypes, os, subprocess

def test_starts_a_sleeper():
    sleeper = subprocess.Popen(["sleep", "600"], start_new_session=True)
    open(os.environ["SLEEPER_PID"], "w").write(str(sleeper.pid))

def test_crashes():
    ctypes.string_at(0)

def test_c():
    pass
"""


@pytest.mark.parametrize("xdist", [[], ["-n", "2"]], ids=["serial", "xdist"])
def test_a_process_a_crashed_round_left_in_a_new_session_is_ended_and_named(
    tmp_path: Path, xdist: list[str], request: pytest.FixtureRequest
) -> None:
    root = write_project(tmp_path, {"tests/test_a.py": SLEEPER})
    proc, _last, left = _run(root, *xdist, SLEEPER_PID=str(tmp_path / "sleeper"), **joining_under_xdist(request, xdist))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    pid = int((tmp_path / "sleeper").read_text())
    assert f"sleep (pid {pid})" in proc.stderr
    assert not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text().split()[2]
    assert not left
    assert _outcomes(root) == {"test_starts_a_sleeper": "passed", "test_crashes": "failed", "test_c": "passed"}


# --- 5. every line as true as the record ------------------------------------------------------------

PASSING = "def test_a():\n    pass\n\ndef test_b():\n    pass\n"


@pytest.mark.parametrize(
    ("hook", "said"),
    [
        (
            "import ctypes\n    ctypes.string_at(0)",
            "pytest died in its session's end (a pytest_sessionfinish hook), after all 2",
        ),
        ("raise RuntimeError('boom')", "pytest died after its session ended (it exited with code 1)"),
    ],
    ids=["segfault", "exception"],
)
def test_a_crash_in_the_session_end_after_passing_tests_exits_3_and_says_where(
    tmp_path: Path, hook: str, said: str
) -> None:
    conftest = f"def pytest_sessionfinish(session):\n    {hook}\n"
    root = write_project(tmp_path, {"tests/conftest.py": conftest, "tests/test_a.py": PASSING})
    proc, last, left = _run(root)
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert last.startswith(f"run_unit: FAILED: {said}"), last
    assert last.endswith("; the tests: all selected tests passed"), last
    doc = read_results(root)
    assert doc["exit_status"] == 3 and set(_outcomes(root).values()) == {"passed"}
    assert json.loads(_dated(root)[0].read_text())["exit_status"] == 3 and not left


SESSION_FIXTURE = """
import ctypes, pytest

@pytest.fixture(scope="session")
def resource():
    yield 1
    ctypes.string_at(0)

@pytest.fixture
def own():
    yield 2
"""


@pytest.mark.parametrize("xdist", [[], ["-n", "2"]], ids=["serial", "xdist"])
def test_a_crash_in_a_session_fixtures_teardown_is_named_as_such(
    tmp_path: Path, xdist: list[str], request: pytest.FixtureRequest
) -> None:
    tests = "def test_a(resource, own):\n    pass\n\ndef test_b(resource, own):\n    pass\n"
    root = write_project(tmp_path, {"tests/conftest.py": SESSION_FIXTURE, "tests/test_a.py": tests})
    proc, _last, left = _run(root, *xdist, **joining_under_xdist(request, xdist))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    entry = read_results(root)["tests"]["tests/test_a.py::test_b"]
    assert (
        "in the teardown of the fixtures around it (module, class or session scope) after the test passed"
        in entry["crash"]["cause"]
    )
    if not xdist:  # pytest's word for a failing teardown after a passing test (xdist says failed)
        assert entry["outcome"] == "error"
    assert _outcomes(root)["test_a"] == "passed" and not left


OWN_FIXTURE = """
import ctypes, pytest

@pytest.fixture
def own():
    yield 2
    ctypes.string_at(0)
"""


def test_a_crash_in_a_tests_own_fixture_teardown_is_its_crash(tmp_path: Path) -> None:
    root = write_project(
        tmp_path, {"tests/conftest.py": OWN_FIXTURE, "tests/test_a.py": "def test_a(own):\n    pass\n"}
    )
    proc, _last, _left = _run(root)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    entry = read_results(root)["tests"]["tests/test_a.py::test_a"]
    assert entry["outcome"] == "failed" and "around it" not in entry["crash"]["cause"]


CRASHES_ONCE = """
import ctypes, os

def test_crashes_once():
    marker = os.environ["CRASHED_ONCE"]
    if not os.path.exists(marker):
        open(marker, "w").close()
        ctypes.string_at(0)

def test_b():
    pass
"""


@pytest.mark.parametrize("xdist", [[], ["-n", "2"]], ids=["serial", "xdist"])
def test_rerun_failures_reruns_a_crashed_test_in_a_fresh_round(
    tmp_path: Path, xdist: list[str], request: pytest.FixtureRequest
) -> None:
    root = write_project(tmp_path, {"tests/test_a.py": CRASHES_ONCE})
    crashed = str(tmp_path / "crashed")
    proc, last, left = _run(
        root, "--rerun-failures", "1", *xdist, CRASHED_ONCE=crashed, **joining_under_xdist(request, xdist)
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert last == "run_unit: all selected tests passed"
    assert "(--rerun-failures 1) in a fresh pytest" in proc.stderr
    entry = read_results(root)["tests"]["tests/test_a.py::test_crashes_once"]
    assert entry["outcome"] == "passed" and entry["attempts"] == ["failed", "passed"]
    assert "Segmentation fault" in entry["crash"]["cause"]  # the first attempt's crash stays on record
    assert len(_dated(root)) == 1 and read_results(root)["exit_status"] == 0 and not left


def test_a_test_crashing_every_attempt_fails_after_its_reruns(tmp_path: Path) -> None:
    tests = "import ctypes\n\ndef test_always():\n    ctypes.string_at(0)\n\ndef test_b():\n    pass\n"
    root = write_project(tmp_path, {"tests/test_a.py": tests})
    proc, _last, _left = _run(root, "--rerun-failures", "2")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    entry = read_results(root)["tests"]["tests/test_a.py::test_always"]
    assert entry["outcome"] == "failed" and entry["attempts"] == ["failed", "failed", "failed"]
    assert _outcomes(root)["test_b"] == "passed"


SWALLOWS_SIGTERM = """
import os, signal, time

def test_swallows_sigterm():
    signal.signal(signal.SIGTERM, lambda *_: None)
    open(os.environ["READY"], "w").close()
    time.sleep(3)

def test_b():
    pass
"""


def _as_from_a_terminal() -> None:
    """A terminal user's run_unit.sh has SIGINT and SIGHUP at their defaults; a suite started as
    a background job of a non-interactive shell (nohup, `&`) passes them on ignored, and the
    supervisor rightly honours that. Reset them, whatever runs this test."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGHUP, signal.SIG_DFL)


def _when_ready(root: Path, ready: Path, signum: int, *args: str) -> tuple[int, str]:
    """Start run_unit.sh, send `signum` to it once `ready` exists; (exit code, output)."""
    env = {**run_env(root), "READY": str(ready)}
    proc = subprocess.Popen(["bash", str(RUN_UNIT), "-p", "no:randomly", "-p", "no:cacheprovider", *args],
                            cwd=root, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            preexec_fn=_as_from_a_terminal)  # fmt: skip
    deadline = time.monotonic() + DONE_WITHIN_S
    while not ready.exists() and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.1)
    proc.send_signal(signum)
    out, _ = proc.communicate(timeout=DONE_WITHIN_S)
    return proc.returncode, out


def test_a_sigterm_a_test_swallows_ends_as_recorded_and_says_so(tmp_path: Path) -> None:
    root = write_project(tmp_path, {"tests/test_a.py": SWALLOWS_SIGTERM})
    code, out = _when_ready(root, tmp_path / "ready", signal.SIGTERM)
    assert code == 0, out
    assert out.strip().splitlines()[-1] == (
        "run_unit: all selected tests passed (SIGTERM reached the run but stopped nothing: a test or library caught it)"
    )
    assert read_results(root)["exit_status"] == 0


SECOND_ROUND = """
import ctypes, os, time

def test_crashes():
    ctypes.string_at(0)

def test_waits():
    open(os.environ["READY"], "w").close()
    time.sleep(30)
"""


def test_an_interrupt_during_a_second_round_is_said_once(tmp_path: Path) -> None:
    root = write_project(tmp_path, {"tests/test_a.py": SECOND_ROUND})
    code, out = _when_ready(root, tmp_path / "ready", signal.SIGINT)
    assert code == 2, out
    assert out.count("run_unit: interrupted by SIGINT") == 1, out
    assert out.strip().splitlines()[-1].startswith("run_unit: interrupted by SIGINT")
    assert _outcomes(root) == {"test_crashes": "failed", "test_waits": "error"}


@pytest.mark.parametrize("args", [["-n", "-1"], ["-n=-2"], ["--numprocesses", "many"], ["-n"]])
def test_a_bad_worker_count_is_a_usage_error(tmp_path: Path, args: list[str]) -> None:
    root = write_project(tmp_path, {"tests/test_a.py": PASSING})
    proc, last, _left = _run(root, *args)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert last.startswith("run_unit: -n needs a number of workers (0 or more), auto or logical"), last
    assert "test session starts" not in proc.stdout


@pytest.mark.parametrize(
    ("args", "reason"),
    [
        (["--rerun-failures", "x"], "run_unit: --rerun-failures needs a whole number >= 0, got 'x'"),
        (["--no-such-flag"], "run_unit: pytest rejected the arguments (see the error above)"),
    ],
    ids=["run_unit's", "pytest's"],
)
def test_a_rejected_argument_ends_on_its_reason(tmp_path: Path, args: list[str], reason: str) -> None:
    root = write_project(tmp_path, {"tests/test_a.py": PASSING})
    proc, last, _left = _run(root, *args)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert last == reason
    assert "usage: bash tests/run_unit.sh" in proc.stderr  # the usage text, above the reason


EXITS_EARLY = """
import pytest

def test_a():
    pytest.exit("enough", returncode=0)

def test_b():
    pass
"""


def test_pytest_exit_with_returncode_0_before_the_last_test_is_a_stop_not_a_pass(tmp_path: Path) -> None:
    root = write_project(tmp_path, {"tests/test_a.py": EXITS_EARLY})
    proc, last, _left = _run(root)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert last.startswith("run_unit: stopped by pytest.exit(): enough"), last
    assert read_results(root)["exit_status"] == 2


@pytest.mark.parametrize(
    ("args", "said"), [(["--collect-only", "-q"], "run_unit: all selected tests passed"), (["--version"], "pytest ")]
)
def test_runs_that_run_no_test_by_design_still_end_0(tmp_path: Path, args: list[str], said: str) -> None:
    # Neither is a pytest that ended without running its tests: --collect-only runs none, and
    # pytest answers a lone --version before it loads a plugin.
    root = write_project(tmp_path, {"tests/test_a.py": PASSING})
    proc, last, _left = _run(root, *args)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert last.startswith(said), last
