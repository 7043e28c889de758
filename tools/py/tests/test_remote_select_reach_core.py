"""The reach bookkeeping (remote_select/reach_core.py): owners, traced actors, scanned values.

Plain unit tests, no Ray: the events Ray's patches would feed (reach.py) are fed directly,
with real modules of a throwaway project imported from a temporary directory.
"""

from __future__ import annotations

import functools
import importlib
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

from testharness.remote_select.reach_core import ProjectFiles, ReachBook
from testharness.remote_select.records import ActorReport, RanFunction

MOD = "rcpkg/mod.py"
OTHER = "rcpkg/other.py"
AID = "a1"


@pytest.fixture
def project(tmp_path: Path) -> Iterator[tuple[Path, ModuleType, ModuleType]]:
    pkg = tmp_path / "rcpkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "other.py").write_text("def helper(x):\n    return x\n")
    (pkg / "mod.py").write_text(
        textwrap.dedent(
            """
            from rcpkg.other import helper

            class Loss:
                def __init__(self, inner=None):
                    self.inner = inner

                def __call__(self, x):
                    return x

            class Calc:
                def add(self, x):
                    return x
            """
        )
    )
    sys.path.insert(0, str(tmp_path))
    try:
        yield tmp_path, importlib.import_module("rcpkg.mod"), importlib.import_module("rcpkg.other")
    finally:
        sys.path.remove(str(tmp_path))
        for name in [n for n in sys.modules if n == "rcpkg" or n.startswith("rcpkg.")]:
            del sys.modules[name]


def _book(root: Path) -> ReachBook:
    return ReachBook(str(root))


def test_an_event_is_charged_to_the_test_and_the_fixture_being_set_up(
    project: tuple[Path, ModuleType, ModuleType],
) -> None:
    root, mod, _ = project
    book = _book(root)
    book.push_test("t::first")
    book.push_fixture("worker")
    book.note_remote(["rcpkg.mod"])
    book.pop()
    book.pop()
    book.push_test("t::own")
    book.note_remote([], [mod.Loss(mod.Calc())])  # an object and what it holds are unpickled there
    book.pop()
    assert book.reach_of("t::first", ["worker"]) == [MOD]
    assert book.reach_of("t::second", ["worker", "tmp_path"]) == [MOD]  # requests the fixture
    assert book.reach_of("t::own", []) == [MOD]
    assert book.reach_of("t::never-ran", ["tmp_path"]) == []


def test_third_party_modules_are_not_charged_and_unknown_ones_make_the_owner_opaque(
    project: tuple[Path, ModuleType, ModuleType],
) -> None:
    root, _, _ = project
    book = _book(root)
    book.push_test("t::third-party")
    book.note_remote(["json", "pathlib"], [Path("x")])
    book.pop()
    book.push_test("t::unknown")
    book.note_remote(["not_imported_here.mod"])  # a class from another driver: cannot be placed
    book.pop()
    book.push_test("t::nameless")
    book.note_remote([None])
    book.pop()
    assert book.reach_of("t::third-party", []) == []
    assert book.reach_of("t::unknown", []) is None
    assert book.reach_of("t::nameless", []) is None


def test_an_opaque_fixture_makes_every_test_that_requests_it_opaque(
    project: tuple[Path, ModuleType, ModuleType],
) -> None:
    book = _book(project[0])
    book.push_fixture("server")
    book.charge(set(), opaque=True)  # e.g. it started a process
    book.pop()
    assert book.reach_of("t::uses-server", ["server"]) is None
    assert book.reach_of("t::plain", []) == []


def test_an_event_with_no_owner_makes_the_whole_session_opaque(project: tuple[Path, ModuleType, ModuleType]) -> None:
    root, mod, _ = project
    book = _book(root)
    book.note_remote([], [mod.Loss])  # sent at import time: nobody can say for whom
    assert book.reach_of("t::any", []) is None
    book.pop()  # popping an empty stack is harmless


def _traced(book: ReachBook) -> None:
    """A fixture creates a traced actor (its report: __init__ ran), then a test calls `add`."""
    book.track(AID, "rcpkg.mod", "/somewhere/rcpkg/mod.py")
    book.push_test("t::first")
    book.push_fixture("calc")
    book.note_remote(["rcpkg.mod"], actor=AID)
    book.fold_reports({AID}, {AID}, {AID: ActorReport((RanFunction(MOD, "Calc.__init__"),), False)})
    book.pop()
    book.note_remote(["rcpkg.mod"], [1], actor=AID)


def test_a_traced_actor_charges_the_functions_it_ran_cumulatively(project: tuple[Path, ModuleType, ModuleType]) -> None:
    book = _book(project[0])
    _traced(book)
    book.fold_reports({AID}, {AID}, {AID: ActorReport((RanFunction(MOD, "Calc.add"),), False)})
    book.pop()
    book.push_test("t::idle")  # requests the fixture, calls nothing
    book.fold_reports({AID}, {AID}, {AID: ActorReport((), False)})
    book.pop()
    assert book.reach_of("t::first", ["calc"]) == sorted(["@" + MOD, f"{MOD}::Calc.__init__", f"{MOD}::Calc.add"])
    assert book.reach_of("t::idle", ["calc"]) == sorted(["@" + MOD, f"{MOD}::Calc.__init__"])
    assert book.reach_of("t::idle", []) == []


def test_a_lost_report_falls_back_to_the_actors_modules(project: tuple[Path, ModuleType, ModuleType]) -> None:
    book = _book(project[0])
    _traced(book)
    book.fold_reports({AID}, {AID}, {AID: None})  # it answered, but not with a report
    book.pop()
    assert book.actors[AID].lost
    assert MOD in book.reach_of("t::first", ["calc"])  # type: ignore[operator]
    assert book.pending() == {}  # never asked again


def test_an_actor_lost_as_it_ends_charges_its_modules_and_is_forgotten(
    project: tuple[Path, ModuleType, ModuleType],
) -> None:
    book = _book(project[0])
    _traced(book)  # t::first called `add`, not reported yet
    book.lose(AID)  # killed in a constructor or a call: no last report
    book.pop()
    assert AID not in book.actors
    assert MOD in book.reach_of("t::first", ["calc"])  # type: ignore[operator]
    book.push_test("t::later")
    book.note_remote(["rcpkg.mod"], actor=AID)  # a call it can no longer report on: the module whole
    book.pop()
    assert MOD in book.reach_of("t::later", [])  # type: ignore[operator]


def test_an_actor_that_ended_or_is_gone_is_forgotten_and_a_busy_one_kept_as_lost(
    project: tuple[Path, ModuleType, ModuleType],
) -> None:
    book = _book(project[0])
    for aid in ("ended", "gone", "busy"):
        book.track(aid, "rcpkg.mod", "/x/rcpkg/mod.py")
    # "ended": its request failed; "gone": its handle was dropped, never asked; "busy": timed out.
    book.fold_reports(asked={"ended", "busy"}, answered={"ended"}, reports={})
    assert set(book.actors) == {"busy"}
    assert book.actors["busy"].lost


def test_a_round_among_some_actors_leaves_the_others_pending(project: tuple[Path, ModuleType, ModuleType]) -> None:
    book = _book(project[0])
    for aid in ("ending", "other"):
        book.track(aid, "rcpkg.mod", "/x/rcpkg/mod.py")
    book.fold_reports(
        asked={"ending"}, answered={"ending"}, reports={"ending": ActorReport((), False)}, among={"ending"}
    )
    assert set(book.pending()) == {"ending", "other"}  # "other" was not part of the round: not lost, not forgotten


def test_an_actor_whose_project_code_escaped_makes_its_users_opaque(
    project: tuple[Path, ModuleType, ModuleType],
) -> None:
    book = _book(project[0])
    _traced(book)
    book.fold_reports({AID}, {AID}, {AID: ActorReport((RanFunction(MOD, "Calc.add"),), True)})
    book.pop()
    assert book.reach_of("t::first", ["calc"]) is None


def test_giving_up_on_reports_means_module_granularity(project: tuple[Path, ModuleType, ModuleType]) -> None:
    book = _book(project[0])
    _traced(book)
    book.give_up()
    book.pop()
    assert MOD in book.reach_of("t::first", ["calc"])  # type: ignore[operator]


def test_values_are_scanned_for_project_code_to_a_bounded_depth(project: tuple[Path, ModuleType, ModuleType]) -> None:
    root, mod, other = project
    files = ProjectFiles(str(root))
    assert files.sent([Path("x"), 3, "s", {"k": (None, b"b")}]) == set()  # pathlib, builtins
    assert files.sent([mod.Loss().__call__]) == {MOD}  # a bound method: its function and its object
    assert files.sent([functools.partial(other.helper, 1)]) == {OTHER}
    assert files.sent([{other.helper: 1}]) == {OTHER}  # dict keys too
    assert files.sent([mod.Loss(other.helper)]) == {MOD, OTHER}  # a project object's attributes
    deep: object = mod.Loss()
    for _ in range(10):
        deep = [deep]
    assert files.sent([deep]) == set()  # deeper than the bound: not followed (documented limit)
    assert files.file_of("json") is None and files.file_of("rcpkg.other") == OTHER


def test_a_task_is_charged_what_its_report_says_ran_or_its_modules_whole(
    project: tuple[Path, ModuleType, ModuleType],
) -> None:
    root, mod, _ = project
    book = _book(root)
    for test, task in (("t::reported", "k1"), ("t::silent", "k2"), ("t::escaped", "k3")):
        book.push_test(test)
        book.push_fixture(f"fx-{task}")
        book.note_remote(["rcpkg.other"], [mod.Calc()], task=task)  # deferred until its report is read
        book.pop()
        book.pop()
    assert book.reach_of("t::reported", []) == []  # nothing charged before the reports are folded
    ran = RanFunction(OTHER, "helper")
    book.fold_tasks({"k1": ActorReport((ran,), False), "k3": ActorReport((ran,), True)})
    assert book.reach_of("t::reported", ["fx-k1"]) == ["@" + MOD, "@" + OTHER, f"{OTHER}::helper"]
    assert book.reach_of("t::silent", []) == [MOD, OTHER]  # no report (another machine, still running)
    assert book.reach_of("t::escaped", []) is None  # it sent work on or started a process
    assert book.tasks == {}
