"""End-to-end scenarios of remote-aware selection, with pytest-testmon in a real inner run.

The fake project has a module (`mylib/worker_impl.py`) whose code only runs in a
subprocess, the way a `@ray.remote` actor's code runs in a Ray worker: testmon's in-process
coverage cannot see it, so an edit there must be caught by the import graph.
Inner runs are subprocesses so that testmon's coverage never nests in this process's.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from selection_project import MAP_FILE, PLUGIN, PYPROJECT, STATE_FILE, Project

from testharness.remote_select import store

pytest_plugins = ["pytester"]

FILES = {
    "mylib/__init__.py": "",
    # Runs only in a child process (the stand-in for a Ray worker).
    "mylib/worker_impl.py": """
        def compute(x):
            return x * 2


        if __name__ == "__main__":
            import sys
            print(compute(int(sys.argv[1])))
    """,
    # The driver side: imports the worker module and starts it "remotely".
    "mylib/actors.py": """
        import subprocess
        import sys

        from . import worker_impl  # noqa: F401  (relative import of the actor module)


        def run_remote(x):
            out = subprocess.run(
                [sys.executable, "-m", "mylib.worker_impl", str(x)],
                capture_output=True, text=True, check=True,
            )
            return int(out.stdout)
    """,
    "mylib/local.py": """
        def add(a, b):
            return a + b
    """,
    # A sub-package reached through `from mylib import sub`, whose __init__ re-exports.
    "mylib/sub/__init__.py": "from .helpers import helper\n",
    "mylib/sub/helpers.py": """
        def helper():
            return "h"
    """,
    # An actor class only ever named by a dotted string (no import statement).
    "mylib/strmod.py": """
        class Actor:
            def value(self):
                return 41
    """,
    "mylib/launcher.py": """
        import subprocess
        import sys

        ACTOR = "mylib.strmod.Actor"


        def launch():
            mod, cls = ACTOR.rsplit(".", 1)
            code = f"import importlib; print(getattr(importlib.import_module('{mod}'), '{cls}')().value())"
            out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
            return int(out.stdout)
    """,
    "tests/conftest.py": """
        import os

        import pytest


        @pytest.fixture(scope="session")
        def cluster():
            # Stand-in for the session-scoped Ray fixture: leaves a trace when started.
            with open("CLUSTER_STARTED", "a") as fh:
                fh.write("x")
            yield
    """,
    "tests/test_remote.py": """
        import os

        from mylib.actors import run_remote


        def test_remote_a(cluster):
            assert run_remote(3) == 6


        def test_remote_b(cluster):
            if os.path.exists("INTERRUPT"):
                raise KeyboardInterrupt
            assert run_remote(4) == 8


        def test_remote_c(cluster):
            assert run_remote(5) == 10
    """,
    "tests/test_local.py": """
        import pytest

        from mylib.local import add


        @pytest.mark.parametrize("a", [1, 2])
        def test_add(a):
            assert add(a, 1) == a + 1
    """,
    "tests/test_pkg.py": """
        from mylib import sub


        def test_helper():
            assert sub.helper() == "h"
    """,
    "tests/test_string.py": """
        from mylib.launcher import launch


        def test_launch():
            assert launch() == 41
    """,
}

REMOTE = {
    "tests/test_remote.py::test_remote_a",
    "tests/test_remote.py::test_remote_b",
    "tests/test_remote.py::test_remote_c",
}
ALL = REMOTE | {
    "tests/test_local.py::test_add[1]",
    "tests/test_local.py::test_add[2]",
    "tests/test_pkg.py::test_helper",
    "tests/test_string.py::test_launch",
}


@pytest.fixture
def project(pytester: pytest.Pytester) -> Project:
    # Run the inner pytest with this environment's testharness, whatever the cwd.
    pytester.makefile(".toml", pyproject=PYPROJECT)
    proj = Project(pytester.path, pytester)
    for rel, text in FILES.items():
        proj.write(rel, text)
    return proj


@pytest.fixture(scope="module")
def seed_copy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where the first `seeded` project of this module is kept for the others."""
    return tmp_path_factory.mktemp("seed") / "project"


@pytest.fixture
def seeded(project: Project, seed_copy: Path) -> Project:
    """A project after a first full, green run (the seed).

    The seed is run once per module; the other tests start from a copy of it, which is a
    moved checkout with its timestamps kept (that a moved checkout runs nothing is a test
    below). Saves one inner pytest per test.
    """
    if seed_copy.is_dir():
        shutil.copytree(seed_copy, project.path, dirs_exist_ok=True)
        return project
    result, ran = project.run()
    assert set(ran) == ALL and set(ran.values()) == {"PASSED"}, result.stdout.str()
    assert (project.path / STATE_FILE).is_file()
    assert (project.path / MAP_FILE).is_file()
    shutil.copytree(project.path, seed_copy)
    return project


def _break_worker(p: Project) -> None:
    p.edit("mylib/worker_impl.py", "return x * 2", "return x * 3")


def _fix_worker(p: Project) -> None:
    # A fix that is not a plain revert: the content differs from the last passing one.
    p.edit("mylib/worker_impl.py", "return x * 3", "return x + x")


def test_no_edit_runs_nothing_and_starts_no_cluster(seeded: Project) -> None:
    marker = seeded.path / "CLUSTER_STARTED"
    marker.unlink()
    result, ran = seeded.run()
    assert ran == {}
    assert result.ret == 0
    assert not marker.exists(), "the session fixture (stand-in for Ray) was set up"
    assert seeded.header(result) == ["remote-select: no remote-affecting change"]


def test_remote_only_edit_is_missed_by_testmon_but_added_by_us(seeded: Project) -> None:
    seeded.edit("mylib/worker_impl.py", "return x * 2", "return x + x")  # same behaviour
    # testmon alone: the edited function body never ran in-process, so nothing is selected.
    _, ran = seeded.run(plugin=False)
    assert ran == {}
    result, ran = seeded.run()
    assert set(ran) == REMOTE, result.stdout.str()
    assert set(ran.values()) == {"PASSED"}
    assert any("mylib/worker_impl.py" in line for line in seeded.header(result))
    # Recorded as passing: the next run selects nothing.
    _, ran = seeded.run()
    assert ran == {}


def test_failing_then_fixed(seeded: Project) -> None:
    _break_worker(seeded)
    for _ in range(2):  # stays selected (and failing) until fixed
        result, ran = seeded.run()
        assert set(ran) == REMOTE and set(ran.values()) == {"FAILED"}, result.stdout.str()
        assert result.ret == 1
    _fix_worker(seeded)
    _, ran = seeded.run()
    assert set(ran) == REMOTE and set(ran.values()) == {"PASSED"}
    _, ran = seeded.run()
    assert ran == {}


def test_exitfirst_keeps_unrun_tests_selected(seeded: Project) -> None:
    _break_worker(seeded)
    for _ in range(2):
        result, ran = seeded.run("-x")
        assert list(ran.values()) == ["FAILED"], result.stdout.str()  # stopped at the first
    _fix_worker(seeded)
    # Every remote test is still selected: the failed one and the ones -x never ran.
    _, ran = seeded.run()
    assert set(ran) == REMOTE and set(ran.values()) == {"PASSED"}
    _, ran = seeded.run()
    assert ran == {}


def test_ctrl_c_keeps_the_trigger(seeded: Project) -> None:
    seeded.edit("mylib/worker_impl.py", "return x * 2", "return x + x")
    (seeded.path / "INTERRUPT").write_text("")
    result, ran = seeded.run()
    assert result.ret == pytest.ExitCode.INTERRUPTED, result.stdout.str()
    passed_before = {n for n, o in ran.items() if o == "PASSED"}
    assert "tests/test_remote.py::test_remote_b" not in ran
    (seeded.path / "INTERRUPT").unlink()
    # What did not complete is selected again; what passed before the interrupt is not.
    _, ran = seeded.run()
    assert set(ran) == REMOTE - passed_before
    assert "tests/test_remote.py::test_remote_b" in ran
    _, ran = seeded.run()
    assert ran == {}


@pytest.mark.parametrize(
    ("rel", "old", "new", "expected"),
    [
        # package __init__ + `from mylib import sub` + relative import inside the package
        ("mylib/sub/helpers.py", 'return "h"', 'return "h" + ""', {"tests/test_pkg.py::test_helper"}),
        # a class only named by the string "mylib.strmod.Actor"
        ("mylib/strmod.py", "return 41", "return 40 + 1", {"tests/test_string.py::test_launch"}),
        # the package's __init__ runs before every module of it
        ("mylib/__init__.py", "", "VERSION = 1\n", ALL),
        # conftest.py chain (a fixture's body runs once for many tests: import-time code)
        ("tests/conftest.py", 'fh.write("x")', 'fh.write("y")', ALL),
    ],
    ids=["package-relative", "string-literal", "package-init", "conftest"],
)
def test_import_kinds_select_their_tests(seeded: Project, rel: str, old: str, new: str, expected: set[str]) -> None:
    target = seeded.path / rel
    if old:
        seeded.edit(rel, old, new)
    else:
        target.write_text(new)
    result, ran = seeded.run()
    assert set(ran) == expected, result.stdout.str()
    assert set(ran.values()) == {"PASSED"}


def test_parametrised_ids_are_state_keys(seeded: Project) -> None:
    state = json.loads((seeded.path / STATE_FILE).read_text())
    assert {"tests/test_local.py::test_add[1]", "tests/test_local.py::test_add[2]"} <= set(state["tests"])
    seeded.edit("mylib/local.py", "return a + b", "return b + a")
    _, ran = seeded.run()
    assert set(ran) == {"tests/test_local.py::test_add[1]", "tests/test_local.py::test_add[2]"}


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


def test_new_tests_are_run(seeded: Project) -> None:
    seeded.write(
        "tests/test_new.py",
        """
        from mylib.actors import run_remote


        def test_new():
            assert run_remote(1) == 2
        """,
    )
    with open(seeded.path / "tests/test_pkg.py", "a") as fh:
        fh.write("\n\ndef test_helper_again():\n    assert sub.helper()\n")
    _, ran = seeded.run()
    assert {"tests/test_new.py::test_new", "tests/test_pkg.py::test_helper_again"} <= set(ran)
    assert not set(ran) & REMOTE
    _, ran = seeded.run()
    assert ran == {}
    # The new file's closure reaches the remote module: an edit there selects it too.
    seeded.edit("mylib/worker_impl.py", "return x * 2", "return x + x")
    _, ran = seeded.run()
    assert set(ran) == REMOTE | {"tests/test_new.py::test_new"}


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


def test_k_keeps_its_meaning(seeded: Project) -> None:
    # No change: -k still runs what matches (testmon only reorders under -k).
    _, ran = seeded.run("-k", "add")
    assert set(ran) == {"tests/test_local.py::test_add[1]", "tests/test_local.py::test_add[2]"}
    # A remote edit does not widen -k: only what matches runs.
    seeded.edit("mylib/worker_impl.py", "return x * 2", "return x + x")
    _, ran = seeded.run("-k", "remote_a")
    assert set(ran) == {"tests/test_remote.py::test_remote_a"}
    # ... and what -k did not run is still selected afterwards.
    _, ran = seeded.run()
    assert set(ran) == REMOTE - {"tests/test_remote.py::test_remote_a"}


def test_removed_module_reselects_its_users(seeded: Project) -> None:
    # The subprocess imports mylib.worker_impl by name: deleting it breaks remote code only.
    (seeded.path / "mylib/worker_impl.py").unlink()
    result, _ = seeded.run()
    # The test file is collected again (and fails to import), instead of staying green.
    assert "ERROR tests/test_remote.py" in result.stdout.str()
    assert result.ret != 0


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
