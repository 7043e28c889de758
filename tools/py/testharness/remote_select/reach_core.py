"""Who reached what remotely: the owner bookkeeping of the reach record (pure: no Ray, no pytest).

Events are charged to every *owner* on a stack: the running test and any fixture being set
up inside it. A test's reach is its own events plus those of every fixture it requests, so
a worker created once by a module-scoped fixture is charged to every test that uses it. An
event with no owner (an actor created at import time) makes the whole session's records
opaque.

For a traced actor (its worker reports the functions it ran, worker_trace.py) an owner is
charged those functions and the actor's module for its import-time code; the same for a
remote function (task) whose run left a report; for anything else sent to Ray, the project
modules whose code runs there (`ProjectFiles.sent`). reach.py is
the thin adapter that patches Ray and feeds this module.
"""

from __future__ import annotations

import functools
import os
import sys
import types
from collections.abc import Collection, Iterable, Mapping
from itertools import islice
from typing import Any

from .records import (
    ActorModule,
    ActorReport,
    RanFunction,
    ReachEntry,
    SentModule,
    format_reach,
)
from .worker_trace import THIRD_PARTY

MAX_DEPTH = 4  # how deep arguments are searched for project objects
MAX_ITEMS = 256  # entries looked at per container


class Bucket:
    """What one owner (a test or a fixture) reached.

    files: modules sent whole (any change in their import closure counts); imports: modules
    of traced actors (only import-time changes in their closure count); units: functions
    that ran in traced actors; actors: traced actors it used."""

    __slots__ = ("actors", "files", "imports", "opaque", "units")

    def __init__(self) -> None:
        self.files: set[str] = set()
        self.imports: set[str] = set()
        self.units: set[RanFunction] = set()
        self.actors: set[str] = set()
        self.opaque = False


class TracedActor:
    """An actor whose worker reports the functions it runs.

    `units` is cumulative since creation: a test that uses an actor may depend on state
    that earlier calls (other tests, the fixture that made it) left in it."""

    __slots__ = ("escaped", "file", "files", "lost", "module", "units")

    def __init__(self, module: str, file: str) -> None:
        self.module = module  # its class's module, and that module's real path here:
        self.file = file  # the worker checks it loaded the same file
        self.files: set[str] = set()  # what module granularity would charge (the fallback)
        self.units: set[RanFunction] = set()
        self.escaped = False  # project code in it started a process or sent Ray work: owners go opaque
        self.lost = False  # a report went missing: module granularity from now on


class ReachBook:
    """Reach per owner; `reach_of` combines a test's own and its fixtures'."""

    def __init__(self, root: str) -> None:
        self.files = ProjectFiles(root)
        self.stack: list[Bucket] = []
        self.tests: dict[str, Bucket] = {}
        self.fixtures: dict[str, Bucket] = {}
        self.session_opaque = False
        self.actors: dict[str, TracedActor] = {}  # actor id (hex) -> traced actor
        # task id (hex) -> (modules its function and arguments come from, owners when sent):
        # remote functions whose run reports what ran (worker_trace._watch_tasks), not yet read
        self.tasks: dict[str, tuple[set[str], list[Bucket]]] = {}

    # -- owners ----------------------------------------------------------------------
    def push_test(self, nodeid: str) -> None:
        self.stack.append(self.tests.setdefault(nodeid, Bucket()))

    def push_fixture(self, argname: str) -> None:
        self.stack.append(self.fixtures.setdefault(argname, Bucket()))

    def pop(self) -> None:
        if self.stack:
            self.stack.pop()

    def reach_of(self, nodeid: str, fixturenames: Iterable[str]) -> list[str] | None:
        """This test's sorted reach entries (records.ReachEntry as text), or None when opaque."""
        if self.session_opaque:
            return None
        buckets = [self.tests.get(nodeid, Bucket())] + [self.fixtures[f] for f in fixturenames if f in self.fixtures]
        if any(b.opaque for b in buckets):
            return None
        entries: set[ReachEntry] = set()
        for b in buckets:
            entries.update(SentModule(f) for f in b.files)
            entries.update(ActorModule(f) for f in b.imports)
            entries |= b.units
        return format_reach(entries)

    # -- events ----------------------------------------------------------------------
    def charge(self, files: set[str], opaque: bool = False, actor: str | None = None) -> None:
        """Charge every owner on the stack: `files` sent whole (or, through traced `actor`,
        only their import-time code), or nothing precise at all (`opaque`)."""
        if not files and not opaque and actor is None:
            return
        if not self.stack:
            self.session_opaque = True
            return
        traced = self.actors.get(actor) if actor is not None else None
        if traced is not None and not traced.lost:
            traced.files |= files  # the fallback, should a report go missing
        for bucket in self.stack:
            bucket.opaque = bucket.opaque or opaque
            if traced is None or traced.lost:
                bucket.files |= files
            else:
                bucket.imports |= files
                bucket.actors.add(actor)  # type: ignore[arg-type]

    def note_remote(
        self,
        modules: Iterable[str | None],
        values: Iterable[Any] = (),
        actor: str | None = None,
        task: str | None = None,
    ) -> None:
        """Code of `modules` runs remotely, with `values` (arguments) sent along; `actor`:
        in that traced actor, whose reports then say which functions actually ran; `task`:
        as the remote function (task) of that id, which reports by itself (`fold_tasks`)."""
        files: set[str] = set()
        for name in modules:
            if name not in sys.modules:  # code we cannot place (a class from another driver; no name)
                self.charge(set(), opaque=True)
            self.files.add_module(name, files)
        files |= self.files.sent(values)
        if task is not None and files and self.stack:
            self.tasks[task] = (files, list(self.stack))
        else:
            self.charge(files, actor=actor)

    def fold_tasks(self, reports: Mapping[str, ActorReport | None]) -> None:
        """Charge every task sent so far to the owners that sent it: with a report, the
        functions that ran and its modules for their import-time code (opaque if it escaped);
        without one (none written, another machine, still running), its modules whole."""
        for task, (files, owners) in self.tasks.items():
            report = reports.get(task)
            for bucket in owners:
                if report is None:
                    bucket.files |= files
                elif report.escaped:
                    bucket.opaque = True
                else:
                    bucket.imports |= files
                    bucket.units.update(report.units)
        self.tasks.clear()

    # -- traced actors ---------------------------------------------------------------
    def track(self, actor_id: str, module: str, file: str) -> None:
        """From now on `actor_id`'s reports say what ran in it (`get_if_exists` may hand
        back an actor already known: it keeps its record)."""
        self.actors.setdefault(actor_id, TracedActor(module, file))

    def forget(self, actor_id: str) -> None:
        self.actors.pop(actor_id, None)

    def lose(self, actor_id: str) -> None:
        """`actor_id` ends without a last report: its owners get its modules whole."""
        if actor_id in self.actors:
            self.absorb(actor_id, None)
            self.forget(actor_id)

    def pending(self) -> dict[str, TracedActor]:
        """The traced actors still worth asking for a report."""
        return {aid: a for aid, a in self.actors.items() if not a.lost}

    def fold_reports(
        self,
        asked: Collection[str],
        answered: Collection[str],
        reports: Mapping[str, ActorReport | None],
        among: Collection[str] | None = None,
    ) -> None:
        """Fold one round of reports into the owners on the stack: `asked` the actors a
        report was requested from, `answered` those whose request finished, `reports` what
        came back (None: an answer that is no report, e.g. from an untraced worker; such
        an actor is lost: module granularity from now on). An actor not asked (its handle
        is gone) or whose request failed has ended: nothing more to ask it. One asked but
        still busy is kept, lost. `among`: the round asked only these (the others wait for the
        next round)."""
        for aid in list(self.pending()):
            if among is not None and aid not in among:
                continue
            self.absorb(aid, reports.get(aid))
            if aid not in reports and (aid in answered or aid not in asked):
                self.forget(aid)

    def give_up(self) -> None:
        """Reports cannot be had this round: every traced actor and task falls back to its modules."""
        for aid in list(self.pending()):
            self.absorb(aid, None)
        self.fold_tasks({})

    def absorb(self, aid: str, report: ActorReport | None) -> None:
        """Fold one report (None: missing) into the actor and into the owners that used it."""
        actor = self.actors[aid]
        if report is None:
            actor.lost = True
        else:
            actor.units.update(report.units)
            actor.escaped = actor.escaped or report.escaped
            if report.units:  # it ran code in this period, whoever asked it to
                for bucket in self.stack:
                    bucket.actors.add(aid)
        for bucket in self.stack:
            if aid not in bucket.actors:
                continue
            if actor.lost:
                bucket.files |= actor.files
            elif actor.escaped:
                bucket.opaque = True
            else:
                bucket.units |= actor.units


class ProjectFiles:
    """Repo-relative paths of the project modules whose code a value sent to Ray may run."""

    def __init__(self, root: str) -> None:
        self.root = os.path.realpath(root)
        self._module_file: dict[str, str | None] = {}

    def add_module(self, name: str | None, files: set[str]) -> bool:
        """Add the project file of imported module `name`; False for third-party and unknown names."""
        if not name:
            return False
        try:
            rel = self._module_file[name]
        except KeyError:
            rel = self._module_file[name] = self.file_of(name)
        if rel:
            files.add(rel)
        return rel is not None

    def file_of(self, name: str) -> str | None:
        """Repo-relative path of an imported module, None for third-party and built-ins."""
        path = getattr(sys.modules.get(name), "__file__", None)
        if not path:
            return None
        real = os.path.realpath(path)
        if not real.startswith(self.root + os.sep) or THIRD_PARTY in real:
            return None
        return os.path.relpath(real, self.root).replace(os.sep, "/")

    def sent(self, values: Iterable[Any], depth: int = MAX_DEPTH) -> set[str]:
        """Project files whose code unpickling or calling `values` may run (documented
        bounds: `depth` levels of containers and attributes, MAX_ITEMS per container)."""
        files: set[str] = set()
        seen: set[int] = set()
        for value in values:
            self._scan(value, depth, files, seen)
        return files

    def _scan(self, value: Any, depth: int, files: set[str], seen: set[int]) -> None:
        if depth < 0 or id(value) in seen:
            return
        seen.add(id(value))
        if isinstance(value, type):
            self.add_module(value.__module__, files)
            return
        if isinstance(value, (types.FunctionType, types.BuiltinFunctionType)):
            self.add_module(getattr(value, "__module__", None), files)
            return
        if isinstance(value, types.MethodType):
            self._scan(value.__func__, depth, files, seen)
            self._scan(value.__self__, depth - 1, files, seen)
            return
        if isinstance(value, functools.partial):
            for part in (value.func, *value.args, *value.keywords.values()):
                self._scan(part, depth - 1, files, seen)
            return
        if isinstance(value, (str, bytes, int, float, bool, type(None))):
            return
        if isinstance(value, dict):
            for k, v in islice(value.items(), MAX_ITEMS):
                self._scan(k, depth - 1, files, seen)
                self._scan(v, depth - 1, files, seen)
            return
        if isinstance(value, (list, tuple, set, frozenset)):
            for v in islice(value, MAX_ITEMS):
                self._scan(v, depth - 1, files, seen)
            return
        if self.add_module(type(value).__module__, files):
            # A project object: what it holds is unpickled (and maybe run) remotely too.
            attrs = getattr(value, "__dict__", None)
            if isinstance(attrs, dict):
                for v in islice(attrs.values(), MAX_ITEMS):
                    self._scan(v, depth - 1, files, seen)
