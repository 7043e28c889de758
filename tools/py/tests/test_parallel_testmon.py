"""`-n N` with --testmon and remote-aware selection (real pytest-xdist, real testmon, real
Ray). --shard, --rerun-failures and Ctrl-C under -n: test_parallel_composes.py.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from xdist_project import (
    ACTOR_FILES,
    Head,
    env_for,
    make_project,
    results_of,
    run_pytest,
)

# --- testmon ---------------------------------------------------------------------------------


def _ran(proc: subprocess.CompletedProcess[str]) -> set[str]:
    return {line.split()[1] for line in proc.stdout.splitlines() if line.startswith("PASSED ")}


def test_testmon_with_remote_aware_selection(tmp_path: Path, shared_head: Head) -> None:
    root = make_project(tmp_path, ACTOR_FILES)
    env = env_for(root, shared_head)
    seed = run_pytest(root, "-n", "2", "--testmon", env=env)
    assert seed.returncode == 0, seed.stdout + seed.stderr
    assert _ran(seed) == {"tests/test_actor.py::test_actor", "tests/test_local.py::test_local"}
    # An edit to code that only runs in the Ray actor: the reach the worker recorded selects
    # exactly the test that sent it there.
    helper = root / "mylib" / "helper.py"
    helper.write_text(helper.read_text().replace("return x * 2", "return 2 * x"))
    again = run_pytest(root, "-n", "2", "--testmon", env=env)
    assert again.returncode == 0, again.stdout + again.stderr
    assert _ran(again) == {"tests/test_actor.py::test_actor"}
    # Planned with that selection: the one file in one worker (not in-process: "no test file").
    assert "testharness: 1 test file(s) to run: 1 xdist worker(s) instead of 2" in again.stdout, again.stdout
    # Nothing changed since: nothing runs, and the record says the run was fine.
    idle = run_pytest(root, "-n", "2", "--testmon", env=env)
    assert idle.returncode == 0 and _ran(idle) == set(), idle.stdout + idle.stderr
    assert results_of(root)["tests"] == {} and results_of(root)["exit_status"] == 0


def test_testmon_records_state_only_for_tests_that_passed(tmp_path: Path, shared_head: Head) -> None:
    files = {
        **ACTOR_FILES,
        "tests/test_local.py": ACTOR_FILES["tests/test_local.py"].replace('== "doubler"', '== "nope"'),
    }
    root = make_project(tmp_path, files)
    env = env_for(root, shared_head)
    first = run_pytest(root, "-n", "2", "--testmon", env=env)
    assert first.returncode == 1
    again = run_pytest(root, "-n", "2", "--testmon", env=env)  # no edit: the failure is still due
    assert "tests/test_local.py::test_local" in again.stdout and _ran(again) == set(), again.stdout
    state = json.loads((root / ".sel_state.json").read_text())
    assert set(state["reach"]) == {"tests/test_actor.py::test_actor"}
