"""Selection fails closed (DESIGN.md: "selection is safe first"): when remote-aware selection
cannot use its files, or planning fails, that run selects every test, never testmon's
selection alone; it says why in one line, moves the file aside and rebuilds it.

The edit in every scenario is to import-time code of a module that only runs in a
subprocess (the stand-in for a Ray worker): pytest-testmon alone selects nothing for it, so
a run that fell back to testmon would pass with the affected tests never run. With real
pytest-testmon in inner runs (the project of remote_select_seeded.py).
"""

from __future__ import annotations

import json

import pytest
from remote_select_seeded import ALL, REMOTE
from selection_project import MAP_FILE, STATE_FILE, Project

from testharness.remote_select import store

PARSE_CACHE = ".sel_map.parse-cache.json"  # beside MAP_FILE
NESTED = "[" * 100_000 + "]" * 100_000  # json.loads: RecursionError


def _edit_import_time_code(p: Project) -> None:
    p.edit("mylib/worker_impl.py", "def compute(x):", "OFFSET = 0\n\n\ndef compute(x):")


def _aside(p: Project, name: str) -> list[str]:
    return sorted(q.name for q in p.path.iterdir() if q.name.startswith(f"{name}.corrupt-"))


def _clean(result: pytest.RunResult) -> str:
    out = result.stdout.str() + result.stderr.str()
    assert "Traceback" not in out and "INTERNALERROR" not in out, out
    return out


@pytest.mark.parametrize("name", [STATE_FILE, MAP_FILE, PARSE_CACHE])
def test_a_file_nested_too_deep_still_runs_the_affected_tests_and_is_rebuilt(seeded: Project, name: str) -> None:
    (seeded.path / name).write_text(NESTED)
    _edit_import_time_code(seeded)
    result, ran = seeded.run()
    out = _clean(result)
    assert result.ret == 0, out
    assert REMOTE <= set(ran) and set(ran.values()) == {"PASSED"}, out
    if name != PARSE_CACHE:
        # The map or the state: nothing it would have narrowed can be trusted, every test runs.
        # (A damaged parse cache narrows nothing: the files it would have answered for are read.)
        assert set(ran) == ALL, out
    warnings = [line for line in seeded.header(result) if "warning" in line]
    assert len(warnings) == 1, warnings
    assert warnings[0].startswith(f"remote-select: warning: {name} is corrupted (JSON nested too deep); moved it to ")
    assert [(seeded.path / a).read_text() for a in _aside(seeded, name)] == [NESTED]

    # Mended: rebuilt at the end of that run, so the next one selects nothing, silently.
    result, ran = seeded.run()
    assert ran == {} and "warning" not in _clean(result), result.stdout.str()
    assert json.loads((seeded.path / name).read_text())["format"].startswith("testharness.remote_select.")


BREAK_PLANNING = """
from testharness.remote_select.engine import RemoteSelector


def plan(self):
    raise RuntimeError("a bug in planning\\non two lines")


RemoteSelector.plan = plan
"""


def test_a_planning_failure_runs_every_test_and_sets_its_files_aside(seeded: Project) -> None:
    seeded.write("break_planning.py", BREAK_PLANNING)  # a plugin (-p), outside every test's closure
    _edit_import_time_code(seeded)
    result, ran = seeded.run("-p", "break_planning")
    out = _clean(result)
    assert result.ret == 0, out
    assert set(ran) == ALL and set(ran.values()) == {"PASSED"}, out  # testmon deselects nothing either
    (line,) = seeded.header(result)
    said = (
        "remote-select: warning: every test is selected: planning failed (RuntimeError: a bug in planning on two lines)"
    )
    assert line.startswith(f"{said}; moved ") and line.endswith(" aside, rebuilt by the next run"), line
    for name in (MAP_FILE, PARSE_CACHE, STATE_FILE):
        assert not (seeded.path / name).exists() and len(_aside(seeded, name)) == 1, name
        assert _aside(seeded, name)[0] in line

    # The next run plans from nothing (every test), and records; the one after selects nothing.
    result, ran = seeded.run()
    assert set(ran) == ALL and "warning" not in _clean(result), result.stdout.str()
    _, ran = seeded.run()
    assert ran == {}
    assert json.loads((seeded.path / STATE_FILE).read_text())["version"] == store.VERSION
