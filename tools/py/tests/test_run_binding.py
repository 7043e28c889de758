"""A pytest that a test starts is not part of the run (issue 56): it is bound to run_unit's run
only where it is the supervisor's own pytest (or an xdist worker of it), never by the
environment it inherits. Through tests/run_unit.sh on a throwaway project, with a real nested
pytest, a real os._exit and a real segfault after it (serially both in one run, one file each:
the second file's nested pytest runs in the round the first file's crash started).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from records_project import joining_under_xdist, read_results, run_unit_sh, write_project

from testharness import run_binding
from testharness.crash_record import SUMMARY_FILE_ENV, SUPERVISE_DIR_ENV, SUPERVISOR_PID_ENV

NESTED = """
import ctypes, os, subprocess, sys
from pathlib import Path

def test_runs_pytest_inside():
    inner = Path(__file__).parent / "inner_check.py"
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly",
                           str(inner)], capture_output=True, text=True)
    Path(os.environ["INNER_OUT"], Path(__file__).stem).write_text(proc.stdout + proc.stderr)
    assert proc.returncode == 0, proc.stdout + proc.stderr

def test_dies():
    DIE

def test_fails():
    assert False, "the third test ran"
"""
INNER = "def test_inner():\n    pass\n"


@pytest.mark.parametrize(
    ("dies", "xdist"),
    [
        # file: (how its test_dies dies, the crash's cause)
        ({"test_a": ("os._exit(0)", "exited with code 0"), "test_b": ("ctypes.string_at(0)", "SIGSEGV")}, []),
        # The nested pytest of a test in an xdist worker inherits PYTEST_XDIST_WORKER too.
        ({"test_a": ("os._exit(0)", "its xdist worker died")}, ["-n", "2"]),
    ],
    ids=["os_exit_0_and_segfault", "os_exit_0_xdist"],
)
def test_a_nested_pytest_writes_nothing_of_the_outer_run(
    tmp_path: Path, dies: dict[str, tuple[str, str]], xdist: list[str], request: pytest.FixtureRequest
) -> None:
    files = {f"tests/{name}.py": NESTED.replace("DIE", die) for name, (die, _cause) in dies.items()}
    root = write_project(tmp_path, {**files, "tests/inner_check.py": INNER})
    inner_out = tmp_path / "inner"
    inner_out.mkdir()
    proc = run_unit_sh(root, *xdist, timeout=120, INNER_OUT=str(inner_out), **joining_under_xdist(request, xdist))
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out
    tests = read_results(root)["tests"]
    expected = {}
    for name, (_die, cause) in dies.items():
        said = (inner_out / name).read_text()
        assert "1 passed" in said  # the inner pytest ran, as a run of its own
        assert "no record" in said  # ... and says why it wrote none
        expected.update({f"tests/{name}.py::test_runs_pytest_inside": "passed",
                         f"tests/{name}.py::test_dies": "failed", f"tests/{name}.py::test_fails": "failed"})  # fmt: skip
        assert cause in tests[f"tests/{name}.py::test_dies"]["crash"]["cause"]
        # (xdist reports its worker's)
        assert (f"CRASHED: tests/{name}.py::test_dies" in proc.stderr) == (not xdist)
    assert {k: v["outcome"] for k, v in tests.items()} == expected, out
    assert "the third test ran" in proc.stdout  # it ran, after the crash
    assert len(list((root / "out" / "unit_results").glob("*.json"))) == 1


# --- the decision, pure -------------------------------------------------------------------------


def _env(supervisor: int) -> dict[str, str]:
    return {SUPERVISE_DIR_ENV: "/r/round1", SUMMARY_FILE_ENV: "/r/round1/summary.json",
            SUPERVISOR_PID_ENV: str(supervisor), "TESTHARNESS_RESULTS_DIR": "/out", "OTHER": "x"}  # fmt: skip


def test_only_the_supervisors_pytest_and_its_xdist_workers_are_bound() -> None:
    parents = {10: 1, 20: 10, 30: 20}  # supervisor 10 -> pytest 20 -> its child 30
    own = run_binding.bind(_env(10), ppid=10, parent_of=parents.get)
    assert own.supervise_dir == Path("/r/round1") and own.summary_file == Path("/r/round1/summary.json")
    worker = run_binding.bind({**_env(10), "PYTEST_XDIST_WORKER": "gw0"}, ppid=20, parent_of=parents.get)
    assert worker.supervise_dir == Path("/r/round1")
    env = _env(10)
    nested = run_binding.bind(env, ppid=20, parent_of=parents.get)  # a pytest a test started
    assert nested.supervise_dir is None and nested.nested
    # Its run's variables are gone from its environment (its own children inherit none), the rest stays.
    assert env == {"OTHER": "x", run_binding.INSIDE_ENV: "1"}
    # A worker's variable inherited by a pytest a test of a worker started: its grandparent is no supervisor.
    deeper = run_binding.bind({**_env(10), "PYTEST_XDIST_WORKER": "gw0"}, ppid=30, parent_of=parents.get)
    assert deeper.supervise_dir is None and deeper.nested
    # Below a nested one: still inside a run, though nothing of it is left in the environment.
    assert run_binding.bind(dict(env), ppid=30, parent_of=parents.get).nested
    plain = run_binding.bind({"OTHER": "x"}, ppid=30, parent_of=parents.get)
    assert plain.supervise_dir is None and not plain.nested
