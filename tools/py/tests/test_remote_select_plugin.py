"""End-to-end scenarios of remote-aware selection, with pytest-testmon in a real inner run.

The fake project has a module (`mylib/worker_impl.py`) whose code only runs in a
subprocess, the way a `@ray.remote` actor's code runs in a Ray worker: testmon's in-process
coverage cannot see it, so an edit there must be caught by the import graph (the project and
its seeded copy: remote_select_seeded.py). Inner runs are subprocesses so that testmon's
coverage never nests in this process's. The selection's records across runs (damaged, moved,
concurrent): test_remote_select_state.py.
"""

from __future__ import annotations

import json

import pytest
from remote_select_seeded import ALL, REMOTE
from selection_project import STATE_FILE, Project

pytest_plugins = ["pytester"]


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
