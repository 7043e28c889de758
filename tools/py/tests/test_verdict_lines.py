"""True lines for the empty and broken cases (issue 56): each is tests/run_unit.sh on a throwaway
project, as a user runs it, one run per case: its exit code, its last line, and the record's
`exit_status` (always the script's exit code) and contents. Real pytest, real pytest-xdist, real
Ray and a real SIGINT to the process group (Ctrl-C in a terminal).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from records_project import RUN_UNIT, joining_under_xdist, read_results, run_env, run_unit_sh, write_project

PASSING = {"tests/test_a.py": "def test_a():\n    pass\n"}
BROKEN = "raise RuntimeError('broken at import')\n"


def _run(root: Path, *args: str, **env: str) -> tuple[int, str, str]:
    """(exit code, last line, all output) of run_unit.sh on `root`."""
    proc = run_unit_sh(root, *args, **env)
    closing = proc.stderr if proc.returncode else proc.stdout  # run_unit's last line: stdout when it passed
    return proc.returncode, (closing.strip().splitlines() or [""])[-1], proc.stdout + proc.stderr


@pytest.mark.parametrize("xdist", [[], ["-n", "2"]], ids=["serial", "xdist"])
def test_k_matching_nothing_ends_0_and_records_0(
    tmp_path: Path, xdist: list[str], request: pytest.FixtureRequest
) -> None:
    root = write_project(tmp_path, PASSING)
    code, last, out = _run(root, "-k", "no_such_test", *xdist, **joining_under_xdist(request, xdist))
    assert code == 0, out
    assert last == "run_unit: no test ran: the selection (markers, -k, --shard) matched none of the 1 tests found"
    doc = read_results(root)
    assert doc["exit_status"] == 0 and doc["tests"] == {}


def test_a_module_skipped_on_purpose_ends_0_saying_why(tmp_path: Path) -> None:
    root = write_project(tmp_path, {
        "tests/test_backend.py": "import pytest\npytest.skip('needs a backend', allow_module_level=True)\n",
    })  # fmt: skip
    code, last, out = _run(root)
    assert code == 0, out
    assert "1 skipped" in out  # pytest's own summary
    assert last == "run_unit: no test ran: 1 file(s) skipped at module level: needs a backend"
    assert read_results(root)["exit_status"] == 0


def test_a_path_that_does_not_exist_ends_4_naming_it(tmp_path: Path) -> None:
    root = write_project(tmp_path, PASSING)
    code, last, out = _run(root, "tests/no_such_file.py")
    assert code == 4, out
    assert last == "run_unit: FAILED: pytest: file or directory not found: tests/no_such_file.py"
    assert "died" not in out
    assert read_results(root)["exit_status"] == 4


def test_a_conftest_that_does_not_import_is_named_and_the_stale_record_goes(tmp_path: Path) -> None:
    root = write_project(tmp_path, {**PASSING, "tests/conftest.py": "import no_such_module_xyz\n"})
    (root / "out").mkdir()
    (root / "out" / "unit_results.json").write_text(json.dumps({"exit_status": 0, "tests": {"stale": {}}}))
    code, last, out = _run(root)
    assert code == 4, out
    line = "tests/conftest.py could not be imported: ModuleNotFoundError: No module named 'no_such_module_xyz'"
    assert last == f"run_unit: FAILED: {line}"
    assert "usage:" not in out and "rejected the arguments" not in out
    doc = read_results(root)  # this run's record: it failed before collection
    assert doc["exit_status"] == 4
    assert doc["tests"] == {
        "tests/conftest.py": {
            "key": "conftest",
            "outcome": "error",
            "duration": 0.0,
            "attempts": ["error"],
            "error": line,
        }
    }
    assert len(list((root / "out" / "unit_results").glob("*.json"))) == 1


@pytest.mark.parametrize("xdist", [[], ["-n", "2"]], ids=["serial", "xdist"])
def test_a_collection_error_ends_alike_serial_and_under_xdist(
    tmp_path: Path, xdist: list[str], request: pytest.FixtureRequest
) -> None:
    root = write_project(tmp_path, {**PASSING, "tests/test_b.py": BROKEN})
    code, last, out = _run(root, *xdist, **joining_under_xdist(request, xdist))
    assert code == 2, out
    assert last == (
        "run_unit: FAILED: 1 test file(s) could not be collected: tests/test_b.py: RuntimeError: broken at import"
        " (see the ERROR lines above)"
    )
    doc = read_results(root)
    assert doc["exit_status"] == 2
    broken = doc["tests"]["tests/test_b.py"]
    assert broken["outcome"] == "error" and broken["error"] == "RuntimeError: broken at import"
    # the other files run, serially as under xdist
    assert doc["tests"]["tests/test_a.py::test_a"]["outcome"] == "passed"


RAY_WAITS = """
import os
from pathlib import Path
import pytest
import ray

@pytest.fixture(scope="session")
def cluster():
    ray.init(num_cpus=2, include_dashboard=False, _node_ip_address="127.0.0.1")
    yield
    ray.shutdown()

@ray.remote
class Waiter:
    def wait(self, started):
        import time
        Path(started).touch()
        time.sleep(120)

def test_quick(cluster):
    assert ray.get(ray.put(1)) == 1

def test_waits_on_an_actor(cluster):
    waiter = Waiter.remote()
    try:
        ray.get(waiter.wait.remote(os.environ["STARTED_FILE"]))
    except BaseException:  # as a library's wait loop, or a __del__ the interrupt was raised in
        pass
    assert ray.get(waiter.wait.remote(os.environ["STARTED_FILE"] + ".2"), timeout=2)
"""


def _like_a_terminal() -> None:
    """Ctrl-C reaches a terminal's foreground group with SIGINT at its default (a background
    job of a script would inherit it ignored); a group of its own, to signal as one."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    os.setsid()


def test_ctrl_c_to_the_group_of_a_ray_run_is_an_interruption_even_where_it_is_caught(tmp_path: Path) -> None:
    # A Ctrl-C that a test or library catches, after which tests fail (Ray's workers got it
    # too): the run was interrupted (2), not "some tests failed" (1), and the record says 2.
    root = write_project(tmp_path, {"tests/test_ray.py": RAY_WAITS})
    proc = subprocess.Popen(["bash", str(RUN_UNIT), "-p", "no:randomly", "-p", "no:cacheprovider"], cwd=root,
                            env=run_env(root), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            preexec_fn=_like_a_terminal)  # fmt: skip
    try:
        deadline = time.monotonic() + 240
        while not (root / "started").exists():  # the actor's method runs: Ray's workers are up
            assert proc.poll() is None, proc.communicate()[0]
            assert time.monotonic() < deadline, "the actor did not start"
            time.sleep(0.1)
        os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C: run_unit, pytest and Ray's processes alike
        out, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 2, out
    assert (
        out.strip()
        .splitlines()[-1]
        .startswith(
            "run_unit: interrupted by SIGINT (a test or library caught it and the session went on to its end: "
            "some tests failed (see the summary above)); results of the tests that ran: "
        )
    ), out
    doc = read_results(root)
    assert doc["exit_status"] == 2
    assert {k.rpartition("::")[2]: v["outcome"] for k, v in doc["tests"].items()} == {
        "test_quick": "passed", "test_waits_on_an_actor": "failed",
    }  # fmt: skip
