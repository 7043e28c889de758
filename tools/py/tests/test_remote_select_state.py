"""Remote-aware selection's records across runs, with pytest-testmon in a real inner run:
damaged, deleted or moved records, two sessions at once, and where the plugin stays inert.

The fake project is remote_select_seeded.py's; inner runs are subprocesses so that testmon's
coverage never nests in this process's.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest
from remote_select_seeded import ALL, REMOTE
from selection_project import MAP_FILE, PLUGIN, STATE_FILE, Project

from testharness.remote_select import store

pytest_plugins = ["pytester"]


def test_touch_only_runs_nothing(seeded: Project) -> None:
    for path in list(seeded.path.rglob("*.py")):
        os.utime(path, (2_000_000_000, 2_000_000_000))
    _, ran = seeded.run()
    assert ran == {}


def test_moved_checkout_runs_nothing(seeded: Project, tmp_path_factory: pytest.TempPathFactory) -> None:
    moved = tmp_path_factory.mktemp("elsewhere") / "checkout"
    shutil.copytree(seeded.path, moved)
    result, ran = seeded.run(cwd=moved)
    assert ran == {}, result.stdout.str()
    assert not any("warning" in line for line in seeded.header(result))
    # And an edit there still works from the moved copy.
    Project(moved, seeded.pytester).edit("mylib/worker_impl.py", "return x * 2", "return x + x")
    _, ran = seeded.run(cwd=moved)
    assert set(ran) == REMOTE


@pytest.mark.parametrize(
    "which",
    ["state-garbage", "state-foreign-version", "state-directory", "map-garbage", "map-wrong-shape", "map-directory"],
)
def test_corrupted_files_are_rebuilt_with_one_warning(seeded: Project, which: str) -> None:
    state = seeded.path / STATE_FILE
    map_ = seeded.path / MAP_FILE
    if which.endswith("directory"):
        target = state if which.startswith("state") else map_
        target.unlink()
        target.mkdir()  # never replaced by a save: moved aside (kept, nothing lost)
        (target / "x").write_text("x")
    elif which == "state-garbage":
        state.write_text("{not json")
    elif which == "state-foreign-version":
        data = json.loads(state.read_text())
        data["version"] = 99
        state.write_text(json.dumps(data))
    elif which == "map-garbage":
        map_.write_bytes(b"\x00\xff")
    else:
        map_.write_text(
            json.dumps({"format": "testharness.remote_select.map", "version": store.MAP_VERSION, "files": []})
        )
    seeded.edit("mylib/worker_impl.py", "return x * 2", "return x + x")
    result, ran = seeded.run()
    assert result.ret == 0, result.stdout.str()
    warnings = [line for line in seeded.header(result) if "warning" in line]
    assert len(warnings) == 1, seeded.header(result)
    assert REMOTE <= set(ran)  # never "deselect everything"
    if which.startswith("state"):
        assert set(ran) == ALL  # no record at all: full re-seed
    _, ran = seeded.run()
    assert ran == {}
    assert json.loads(state.read_text())["version"] == store.VERSION
    if which.endswith("directory"):
        aside = [p for p in seeded.path.iterdir() if ".corrupt-" in p.name]
        assert len(aside) == 1 and (aside[0] / "x").read_text() == "x"
        assert any("is a directory; moved it to" in line for line in warnings)


# Each session waits for the other at its end, so both finish together, each after both
# have planned (a session's plan is made from the files as they were when it started).
BARRIER_CONFTEST = """


def pytest_sessionfinish(session):
    import time

    barrier = os.environ.get("BARRIER_DIR")
    if not barrier:
        return
    open(os.path.join(barrier, str(os.getpid())), "w").close()
    deadline = time.monotonic() + 60
    while len(os.listdir(barrier)) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
"""


def test_concurrent_sessions_merge_their_records(project: Project, tmp_path_factory: pytest.TempPathFactory) -> None:
    with open(project.path / "tests/conftest.py", "a") as fh:
        fh.write(BARRIER_CONFTEST)
    barrier = tmp_path_factory.mktemp("barrier")
    env = {**os.environ, "BARRIER_DIR": str(barrier)}
    mine = {"tests/test_local.py": {"tests/test_local.py::test_add[1]", "tests/test_local.py::test_add[2]"}}
    mine["tests/test_pkg.py"] = {"tests/test_pkg.py::test_helper"}
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "pytest", "--testmon", "-v", "-p", PLUGIN, "-p", "testharness.testmon_data", tfile],
            cwd=project.path,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for tfile in mine
    ]
    outs = [p.communicate(timeout=180)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    assert len(os.listdir(barrier)) == 2  # both reached their end before either saved
    ran_together = set().union(*mine.values())

    state = json.loads((project.path / STATE_FILE).read_text())
    assert ran_together <= set(state["tests"])
    map_tests = json.loads((project.path / MAP_FILE).read_text())["tests"]
    for tfile, nodeids in mine.items():
        assert set(map_tests[tfile]["nodeids"]) == nodeids
    # The next run adds only what neither session ran: both sessions' passes were kept.
    # (testmon may select more: a session that starts after another has collected deletes
    # that one's tests it does not know as passing yet, a rerun and never a miss.)
    result, ran = project.run()
    assert project.header(result) == [
        "remote-select: no remote-affecting change; 2 test file(s) with tests that never passed"
    ]
    assert ALL - ran_together <= set(ran), result.stdout.str()
    _, ran = project.run()
    assert ran == {}
    assert not [p.name for p in project.path.iterdir() if p.name.endswith(".lock")]


def test_deleting_both_files_reseeds(seeded: Project) -> None:
    (seeded.path / STATE_FILE).unlink()
    (seeded.path / MAP_FILE).unlink()
    _, ran = seeded.run()
    assert set(ran) == ALL
    _, ran = seeded.run()
    assert ran == {}


def test_inert_without_source_packages(project: Project) -> None:
    (project.path / "pyproject.toml").write_text('[tool.pytest.ini_options]\ntestpaths = ["tests"]\n')
    result, ran = project.run()
    assert set(ran) == ALL
    lines = project.header(result)
    assert len(lines) == 1 and "source_packages" in lines[0]
    assert not list(project.path.glob(".*state*.json"))


def test_does_nothing_without_testmon(project: Project) -> None:
    result = project.pytester.runpytest_subprocess("-p", PLUGIN, "-q")
    result.assert_outcomes(passed=len(ALL))
    assert not list(project.path.glob(".*state*.json"))
    assert "remote-select" not in result.stdout.str()
