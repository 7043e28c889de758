"""Run-time record of what each test sent to other processes (the "precision" record):
the thin adapter that patches Ray and feeds the bookkeeping in reach_core.py.

pytest-testmon sees the code a test runs in the pytest process. What it cannot see is
code run elsewhere: Ray actors, Ray tasks, subprocesses. This recorder notes, per test,

  * for actors it can trace (sync, one thread, Ray started after the recorder), and for
    remote functions (tasks) whose run left a report (worker_trace._watch_tasks): the
    project functions that ran in them (worker_trace.py runs in every Ray worker of the
    session; `settle` collects each actor's list), and their modules for import-time code;
  * otherwise, the project modules of the actor classes it created and called, the remote
    functions it submitted, and the project objects it sent along (arguments, `ray.put`
    values: unpickling them runs their classes' code in the worker); and
  * whether it, or project code in one of its actors, started a process some other way
    (subprocess, fork, multiprocessing), in which case nothing precise can be said and the
    test is "opaque".

The selector then uses those functions, or the import closure of those modules, instead
of the test file's whole static closure. Ray's own service processes (started inside the
`ray` package, e.g. by `ray.init`) are not the test's code and do not make it opaque; a
process started with no owner is ignored. Ray is patched only once it is imported (a
post-import hook), so a run that never imports Ray never pays for it.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.machinery
import json
import os
import shutil
import sys
import sysconfig
import tempfile
import types
import weakref
from collections.abc import Callable, Iterable
from typing import Any

from testharness import real_ray

from .after_import import AfterImport
from .reach_core import ReachBook
from .records import ActorReport, RecordError, parse_actor_report
from .worker_trace import PROCESS_EVENTS

_STDLIB = sysconfig.get_paths()["stdlib"] + os.sep
_HARNESS_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
_DRAIN_TIMEOUT_S = 30.0  # an actor busy longer than this is no longer traced


def _constructing(actor_id: str) -> bool:
    """Whether this job's actor `actor_id` is still being created (its constructor has not
    returned), as the GCS says; False where it cannot say (the actor is asked as before)."""
    ray: Any = real_ray.connected()
    if ray is None:
        return False
    try:
        actor = real_ray.job_actors(ray, real_ray.job_hex(ray)).get(actor_id)
    except Exception:  # noqa: BLE001  a cluster going away or another Ray: ask it, as before
        return False
    return actor is not None and actor.state != "ALIVE"


class ReachRecorder:
    """Feeds a `ReachBook` from Ray's calls and the process audit events."""

    # True while a recorder asks its actors for reports. Shared by all recorders: those calls
    # are nobody's reach, also for a recorder a test nests inside the session's own.
    draining = False

    def __init__(self, root: str) -> None:
        self.book = ReachBook(root)
        self.root = self.book.files.root
        self.handles: dict[str, weakref.ref[Any]] = {}  # traced actor id (hex) -> its handle
        self._ray_dir: str | None = None
        self._installed = False
        self._originals: list[tuple[Any, str, Any]] = []
        self._tracing = False  # this session's Ray workers run worker_trace's hook
        self._task_dir: str | None = None  # where their tasks leave reports (worker_trace._watch_tasks)

    # -- owners (see ReachBook) -------------------------------------------------------
    def push_test(self, nodeid: str) -> None:
        self.book.push_test(nodeid)

    def push_fixture(self, argname: str) -> None:
        self.book.push_fixture(argname)

    def pop(self) -> None:
        self.book.pop()

    def reach_of(self, nodeid: str, fixturenames: Iterable[str]) -> list[str] | None:
        """This test's sorted reach entries, or None when opaque: "path" (a module sent
        whole), "@path" (a traced actor's module: import-time code only) and "path::Qual.name"
        (a function that ran in a traced actor)."""
        return self.book.reach_of(nodeid, fixturenames)

    # -- events ----------------------------------------------------------------------
    def note_remote(
        self, modules: Iterable[str | None], *values: Any, actor: str | None = None, task: str | None = None
    ) -> None:
        """Code of `modules` runs remotely, with `values` (arguments) sent along; `actor`:
        in that traced actor, whose reports then say which functions actually ran; `task`:
        as that task, whose run reports by itself."""
        if not self._ignored(sys._getframe(1), process=False):
            self.book.note_remote(modules, values, actor=actor, task=task)

    def note_process(self) -> None:
        """A process was started: unless Ray or the harness started it, the test is opaque.

        Outside any test (collection, session start and end) it is nobody's: third-party
        imports run `ldconfig` and the like, and the import-time code that could start one
        is covered by the import digests anyway."""
        if self.book.stack and not self._ignored(sys._getframe(1), process=True):
            self.book.charge(set(), opaque=True)

    # -- traced actors ---------------------------------------------------------------
    def settle(self) -> None:
        """Collect what every traced actor ran since the last call and charge it to the
        owners on the stack. Called when a fixture's set-up ends and before a test's
        teardown report, so what a test's calls ran is known before its reach is read."""
        if not self.book.actors and not self.book.tasks:
            return
        try:
            self._settle_tasks()
            if self.book.actors:
                self._settle()
        except Exception:  # noqa: BLE001  never fail a test: module granularity instead
            self.book.give_up()

    def _settle_tasks(self) -> None:
        """Fold the reports the tasks sent so far left in the task directory (none: their
        modules whole)."""
        reports: dict[str, ActorReport | None] = {}
        for task in self.book.tasks:
            path = os.path.join(self._task_dir, task) if self._task_dir else ""
            try:
                with open(path, encoding="utf-8") as fh:
                    lines = fh.read().splitlines()
                os.unlink(path)
            except OSError:
                continue
            parts = [_report(json.loads(line)) if line.strip() else None for line in lines]
            if parts and all(p is not None for p in parts):
                units = {u for p in parts if p is not None for u in p.units}
                reports[task] = ActorReport(tuple(units), any(p.escaped for p in parts if p is not None))
        self.book.fold_tasks(reports)

    def ending(self, handle: Any) -> None:
        """`handle`'s actor is about to be terminated or killed: take its last report now
        (it runs nothing after that) and stop asking it. Only it is asked: the others report
        at the next settle, under the same owners. One still in its constructor (a late
        worker, a peer waiting for a rank that failed) cannot answer before it ends: asking
        would hold the kill back for the whole drain timeout, so it is lost at once (its
        owners get its modules whole, as for any report that does not come)."""
        aid = real_ray.actor_id_of(handle)
        if aid is None or aid not in self.book.actors:
            return
        if _constructing(aid):
            self.book.lose(aid)
            return
        try:
            self._settle(only=aid)
        except Exception:  # noqa: BLE001  never fail the kill: module granularity for it
            self.book.lose(aid)
        self.book.forget(aid)

    def _settle(self, only: str | None = None) -> None:
        """Ask the pending traced actors (or only actor `only`) for their reports and fold them."""
        from . import worker_trace

        pending = self.book.pending()
        if only is not None:
            pending = {only: pending[only]} if only in pending else {}
        ray: Any = real_ray.connected()
        refs: dict[Any, str] = {}
        if ray is not None:
            ReachRecorder.draining = True
            try:
                for aid, actor in pending.items():
                    handle = self.handles[aid]() if aid in self.handles else None
                    if handle is not None:
                        with contextlib.suppress(Exception):  # a dead actor: its report is lost
                            refs[handle.__ray_call__.remote(worker_trace.drain, actor.module, actor.file)] = aid
            finally:
                ReachRecorder.draining = False
        done: list[Any] = []
        if refs:
            done, _ = ray.wait(list(refs), num_returns=len(refs), timeout=_DRAIN_TIMEOUT_S)
        reports: dict[str, ActorReport | None] = {}
        for ref in done:
            with contextlib.suppress(Exception):  # it ended meanwhile: its report is lost
                reports[refs[ref]] = _report(ray.get(ref))
        self.book.fold_reports(
            asked=set(refs.values()), answered={refs[ref] for ref in done}, reports=reports, among=set(pending)
        )
        self.handles = {aid: h for aid, h in self.handles.items() if aid in self.book.actors}

    def _ignored(self, frame: types.FrameType | None, process: bool) -> bool:
        """Events that are not the test's doing: processes Ray starts for itself (from
        anywhere inside the `ray` package, e.g. `ray.init`), and whatever the harness's own
        code does (the tracker measuring memory on every node, `git` for the results file)."""
        ray_dir = self._ray_dir or "\0"
        while frame is not None:
            name = frame.f_code.co_filename
            if name.startswith(ray_dir):
                if process:
                    return True
            elif name != __file__ and not name.startswith(_STDLIB):
                return name.startswith(_HARNESS_DIR)  # the first caller that is neither
            frame = frame.f_back
        return False

    # -- hooks -----------------------------------------------------------------------
    def install(self) -> None:
        """Audit hook and multiprocessing patch now; Ray patches when Ray is imported."""
        if self._installed:
            return
        self._installed = True
        recorder = self

        def audit(event: str, args: tuple[Any, ...]) -> None:
            if event in PROCESS_EVENTS and recorder._installed:
                recorder.note_process()

        sys.addaudithook(audit)  # cannot be removed: `uninstall` makes it inert
        import multiprocessing.process as mp_process

        self._wrap(mp_process.BaseProcess, "start", lambda process, *a, **k: recorder.note_process())
        if real_ray.imported() is not None:
            self._patch_ray()
        else:  # not imported yet, or a stand-in (never patched): Ray's own import, if it comes
            sys.meta_path.insert(0, AfterImport("ray", self._patch_ray, self, before=self._note_ray_dir))

    def uninstall(self) -> None:
        self._installed = False
        for finder in [f for f in sys.meta_path if isinstance(f, AfterImport) and f.owner is self]:
            sys.meta_path.remove(finder)
        while self._originals:  # newest first, so nested recorders unwind correctly
            owner, attr, original = self._originals.pop()
            setattr(owner, attr, original)
        if self._task_dir is not None:
            shutil.rmtree(self._task_dir, ignore_errors=True)
            self._task_dir = None

    def _note_ray_dir(self, spec: importlib.machinery.ModuleSpec) -> None:
        # Before `import ray` runs: what its import starts is Ray's too (Ray 2.46 runs a
        # subprocess to look for AMD GPUs), not the test's. Confirmed or undone by _patch_ray.
        if spec.origin:
            self._ray_dir = os.path.dirname(os.path.abspath(spec.origin)) + os.sep

    def _patch_ray(self) -> None:
        ray = real_ray.imported()
        if ray is None:
            self._ray_dir = None
            return  # a `ray` of the project's own (a folder shadowing Ray): nothing of Ray's to patch
        senders = real_ray.work_senders(ray)
        # As in code objects: the path the module was imported from (not resolved).
        self._ray_dir = os.path.dirname(os.path.abspath(str(ray.__file__))) + os.sep
        recorder = self

        def with_trace_hook(*args: Any, **kwargs: Any) -> tuple[tuple[Any, ...], dict[str, Any]]:
            """ray.init arguments that make every worker of the session trace itself."""
            env = kwargs.get("runtime_env")
            if ray.is_initialized() or (env is not None and not isinstance(env, dict)):
                return args, kwargs
            env = dict(env or {})
            first = env.get("worker_process_setup_hook")  # the project's own hook runs first
            from ray import cloudpickle

            from . import worker_trace

            cloudpickle.register_pickle_by_value(worker_trace)  # workers need not import the harness
            if recorder._task_dir is None:
                recorder._task_dir = tempfile.mkdtemp(prefix="testharness-tasks-")
            manager = real_ray.task_function_manager()  # None: tasks report by their module only
            env["worker_process_setup_hook"] = worker_trace.make_hook(
                recorder.root, recorder._task_dir, manager, first, senders
            )
            recorder._tracing = True
            return args, dict(kwargs, runtime_env=env)

        def on_create(
            handle: Any, actor_class: Any, args: Any = None, kwargs: Any = None, *_: Any, **options: Any
        ) -> None:
            cls = real_ray.actor_user_class(actor_class)
            module = getattr(cls, "__module__", None) or type(actor_class).__module__
            path = getattr(sys.modules.get(module), "__file__", None)
            actor = real_ray.actor_id_of(handle)
            traced = bool(recorder._tracing and path and actor and real_ray.runs_calls_in_order(actor_class, options))
            if traced and actor and path:
                # `get_if_exists` may hand back an actor already known
                recorder.book.track(actor, module, os.path.realpath(path))
                recorder.handles[actor] = weakref.ref(handle)
            recorder.note_remote([module], args, kwargs, actor=actor if traced else None)

        def on_call(handle: Any, method_name: str, args: Any = None, kwargs: Any = None, *_: Any, **__: Any) -> None:
            if ReachRecorder.draining:
                return
            aid = real_ray.actor_id_of(handle)
            if aid in recorder.book.actors and method_name == "__ray_terminate__":
                recorder.ending(handle)  # its exit runs no call of ours: nothing to charge
                return
            recorder.note_remote(
                [real_ray.actor_module_of(handle)],
                args,
                kwargs,
                actor=aid if aid in recorder.book.actors else None,
            )

        def on_task(result: Any, function: Any, args: Any = None, kwargs: Any = None, *_: Any, **__: Any) -> None:
            task = _task_id(result) if recorder._tracing else None
            module = getattr(real_ray.task_function_of(function), "__module__", None)
            recorder.note_remote([module], args, kwargs, task=task)

        def before_shutdown(*_: Any, **__: Any) -> None:
            # Ray kills its actors without running their exit handlers: ask them first.
            recorder.settle()
            recorder.book.actors.clear()
            recorder.handles.clear()

        self._wrap(ray, "init", rewrite=with_trace_hook)
        self._wrap(ray, "shutdown", before_shutdown)
        self._wrap(ray, "kill", lambda actor, *a, **k: recorder.ending(actor))
        create_actor, call_actor, submit_task = senders
        self._wrap(*create_actor, after=on_create)
        self._wrap(*call_actor, on_call)
        self._wrap(*submit_task, after=on_task)
        self._wrap(ray, "put", lambda value, *a, **k: recorder.note_remote([], value))

    def _wrap(
        self,
        owner: Any,
        attr: str,
        before: Callable[..., None] | None = None,
        after: Callable[..., None] | None = None,
        rewrite: Callable[..., tuple[tuple[Any, ...], dict[str, Any]]] | None = None,
    ) -> None:
        """Wrap `owner.attr`: `rewrite(*args)` may change its arguments, `before(*args)` runs
        ahead of it, `after(result, *args)` once it returned. If they fail, the owners go opaque."""
        original = getattr(owner, attr)
        recorder = self

        @functools.wraps(original)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            try:
                if rewrite is not None:
                    args, kwargs = rewrite(*args, **kwargs)
                if before is not None:
                    before(*args, **kwargs)
            except Exception:  # noqa: BLE001  never break the call; an unknown reach means the static closure
                recorder.book.charge(set(), opaque=True)
            result = original(*args, **kwargs)
            if after is not None:
                try:
                    after(result, *args, **kwargs)
                except Exception:  # noqa: BLE001  never break the call: the owners go opaque
                    recorder.book.charge(set(), opaque=True)
            return result

        self._originals.append((owner, attr, original))
        setattr(owner, attr, wrapper)


def _task_id(refs: Any) -> str | None:
    """The id of the task that `RemoteFunction._remote` returned the result refs of (None
    when it returned no plain ref: no returns, a generator)."""
    ref = refs[0] if isinstance(refs, list) and refs else refs
    task_id = getattr(ref, "task_id", None)
    return task_id().hex() if callable(task_id) else None


def _report(answer: Any) -> ActorReport | None:
    """worker_trace.drain's answer as a record; None when there is none to be had (an
    untraced worker, another copy of the code, a malformed answer)."""
    try:
        return parse_actor_report(answer)
    except RecordError:
        return None
