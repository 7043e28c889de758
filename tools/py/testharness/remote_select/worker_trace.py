"""Runs inside Ray worker processes: which project functions ran there (the per-function reach).

The recorder (reach.py) makes Ray run `make_hook(...)`'s hook in every worker process of
the session (`worker_process_setup_hook`), and, at the end of each test or fixture set-up,
calls `drain` in every live actor it tracks (`actor.__ray_call__`), and again just before
an actor is terminated, killed or Ray shut down. A remote function (task) reports by itself
when it returns, into a file named after its task id (`_watch_tasks`). Tasks of a sync actor run one at a time on
its main thread in the order the driver sent them, so a drain returns everything the calls
sent before it ran.

A function is reported as (file, outermost enclosing function or method): a nested function,
lambda or comprehension counts as part of the function that defines it, which is the unit
the selector fingerprints. Every thread is watched on Python >= 3.12 (`sys.monitoring`, each
code object reported once per drain); on 3.11, `sys.setprofile` covers the worker's main
thread and threads started through `threading` (not threads C code starts), paused while
an `import` statement loads a module (import-time code is the import digests' part); a
drain answers None once another profiler has replaced it.
A worker whose project code starts a process or sends work to other Ray workers says so
("escaped"): what runs there is not traced, and the recorder stops being precise for it.

This module is pickled *by value* into the workers (they need not be able to import the
harness), so it uses the standard library only, and keeps its state in `sys.modules`:
each pickled function arrives with its own copy of the module's globals.
"""

from __future__ import annotations

import importlib
import json
import os
import sys
import threading
import types
from collections.abc import Callable, Sequence
from typing import Any

_STATE = "_testharness_remote_trace"
THIRD_PARTY = os.sep + "site-packages" + os.sep  # a virtual environment inside the checkout
PROCESS_EVENTS = frozenset(
    {"subprocess.Popen", "os.system", "os.exec", "os.posix_spawn", "os.spawn", "os.fork", "os.forkpty"}
)


def make_hook(
    root: str,
    task_dir: str | None = None,
    manager: type | None = None,
    first: Callable[[], None] | str | None = None,
    senders: Sequence[tuple[type, str]] = (),
) -> Callable[[], None]:
    """The `worker_process_setup_hook` for `ray.init` (a closure: Ray needs a callable of no
    arguments). `task_dir`: where each remote function's run leaves its report; `manager`:
    Ray's class that hands a worker each task's function (real_ray.task_function_manager,
    pickled by reference: the workers import it from their Ray), None where Ray has none.
    `first`: the project's own hook (a callable, or "module.function" as Ray takes it), run
    before tracing starts: what it imports is set-up, not a test's code. `senders`: where
    Ray sends work to other workers (real_ray.work_senders), watched for escapes."""

    def testharness_trace_hook() -> None:
        if isinstance(first, str):
            module, _, name = first.rpartition(".")
            getattr(importlib.import_module(module), name)()
        elif first is not None:
            first()
        install(root, task_dir, manager, senders)

    return testharness_trace_hook


def install(
    root: str, task_dir: str | None = None, manager: type | None = None, senders: Sequence[tuple[type, str]] = ()
) -> None:
    if _STATE in sys.modules:
        return
    state: Any = types.ModuleType(_STATE)
    state.root = os.path.join(os.path.realpath(root), "")
    state.realpaths = {}
    state.seen = {}  # id(code) -> code; code objects kept alive so an id is never reused
    state.escaped = False
    state.rearm = lambda: None
    state.intact = lambda: True  # False once another tool took over the hook this uses
    sys.modules[_STATE] = state
    _watch_escapes(state, senders)
    _watch_calls(state)
    if task_dir and manager is not None:
        _watch_tasks(state, task_dir, manager)


def _watch_tasks(state: Any, task_dir: str, manager: Any) -> None:
    """Each remote function (task) that runs here writes what ran since the previous report
    (its arguments' unpickling included) to `task_dir/<task id>`, one JSON line per attempt.

    Ray asks `manager.get_execution_info` for the function to run (once per function and
    worker); the function handed back is wrapped. Actor methods are left alone (`drain` serves
    them). A worker on another machine has no `task_dir`: it writes nothing, and the recorder
    falls back to the function's module."""
    try:
        import ray
    except ImportError:
        return
    original = manager.get_execution_info
    if not os.path.isdir(task_dir):
        return

    def get_execution_info(self: Any, job_id: Any, descriptor: Any) -> Any:
        info = original(self, job_id, descriptor)
        try:
            if descriptor.is_actor_method():
                return info
            function = info.function

            def traced(*args: Any, **kwargs: Any) -> Any:
                before, state.escaped = state.escaped, False
                try:
                    return function(*args, **kwargs)
                finally:
                    try:
                        report = _report(state) if state.intact() else None
                        task = ray.get_runtime_context().get_task_id()
                        if report is not None and task:
                            with open(os.path.join(task_dir, task), "a", encoding="utf-8") as fh:
                                fh.write(json.dumps(report) + "\n")
                    except Exception:  # noqa: BLE001  no report: the recorder falls back to the module
                        pass
                    state.escaped = state.escaped or before

            return info._replace(function=traced)
        except Exception:  # noqa: BLE001  another Ray: the function as it is, untraced
            return info

    manager.get_execution_info = get_execution_info


def _watch_calls(state: Any) -> None:
    """Record every code object that starts running, in every thread."""
    seen = state.seen  # bound here: module attributes are cleared at interpreter exit
    mon = getattr(sys, "monitoring", None)  # Python >= 3.12: all threads, even ones C code starts
    tool = next((t for t in (2, 3, 4, 5) if mon is not None and mon.get_tool(t) is None), None)
    if mon is not None and tool is not None:
        mon.use_tool_id(tool, "testharness-remote-select")
        disable = mon.DISABLE

        def on_start(code: types.CodeType, offset: int) -> object:
            seen[id(code)] = code
            return disable  # once per code object until the next report re-arms it

        mon.register_callback(tool, mon.events.PY_START, on_start)
        mon.set_events(tool, mon.events.PY_START)
        state.rearm = mon.restart_events
        return

    def profile(frame: types.FrameType, event: str, arg: object) -> None:
        if event == "call":
            code = frame.f_code
            if id(code) not in seen:
                seen[id(code)] = code

    # Python 3.11: this thread and threads started later through `threading`.
    sys.setprofile(profile)
    _profile_new_threads(profile)
    state.intact = lambda: sys.getprofile() is profile  # a profiler started later replaces it
    _quiet_imports(profile)


def _profile_new_threads(profile: Callable[..., None]) -> None:
    """Each thread started through `threading` installs the profiler as it starts, with
    `_set_profile`: `threading.setprofile` would make it call `sys.setprofile` once, bare,
    and a thread whose call failed died before running its target."""
    bootstrap = getattr(threading.Thread, "_bootstrap_inner", None)
    if bootstrap is None:  # not CPython's threading: its documented hook
        threading.setprofile(profile)
        return

    def profiled_bootstrap(thread: threading.Thread) -> None:
        _set_profile(profile)
        bootstrap(thread)

    threading.Thread._bootstrap_inner = profiled_bootstrap  # type: ignore[attr-defined]


def _quiet_imports(profile: Callable[..., None]) -> None:
    """Pause the 3.11 profiler while an `import` statement loads a module (in that thread):
    what runs at import time is what import digests cover, and profiling torch's and
    transformers' imports made a policy worker start 78% slower (bench/trace_overhead.py).
    An import of a module already loaded leaves the profiler alone: each pause is two
    `sys.setprofile` calls, which threads importing at once make fail (`_set_profile`)."""
    import builtins

    original = builtins.__import__
    modules = sys.modules

    def quiet_import(name: str, globals: Any = None, locals: Any = None, fromlist: Any = (), level: int = 0) -> Any:
        loaded = level == 0 and name in modules
        if loaded or sys.getprofile() is not profile:  # nothing to load, nested, or not ours
            return original(name, globals, locals, fromlist, level)
        paused = _set_profile(None)
        try:
            return original(name, globals, locals, fromlist, level)
        finally:
            if paused:
                _set_profile(profile)

    builtins.__import__ = quiet_import


def _set_profile(profile: Callable[..., object] | None) -> bool:
    """`sys.setprofile`, tried again when it fails: on 3.11 it runs the audit hooks while
    holding a process-wide reentrancy guard, and an audit hook written in Python (ours:
    `_watch_escapes`) can hand the GIL to another thread, whose own `sys.setprofile` then
    raises RuntimeError ("Cannot install a profile function while another profile
    function is being installed"; CPython gh-94510). The failed call clears the guard."""
    for _ in range(100):
        try:
            sys.setprofile(profile)
            return True
        except RuntimeError:
            continue
    return False


def _watch_escapes(state: Any, senders: Sequence[tuple[type, str]]) -> None:
    """Note when project code makes code run where it is not traced: a process it starts,
    or work it sends to other Ray workers (through `senders`, or `ray.put`)."""

    def note() -> None:
        state.escaped = state.escaped or _started_by_project(sys._getframe(2), state.root)

    def audit(event: str, args: tuple[Any, ...]) -> None:
        if event in PROCESS_EVENTS:
            note()

    def noting(owner: Any, attr: str) -> None:
        original = getattr(owner, attr)

        def wrapper(*args: Any, **kwargs: Any) -> Any:
            note()
            return original(*args, **kwargs)

        setattr(owner, attr, wrapper)

    import multiprocessing.process as mp_process  # its `spawn` start method audits nothing

    noting(mp_process.BaseProcess, "start")
    for owner, attr in senders:  # actors and tasks sent from here run elsewhere
        noting(owner, attr)
    ray = sys.modules.get("ray")
    if ray is not None:  # a Ray worker: objects put from here are unpickled elsewhere
        noting(ray, "put")
    sys.addaudithook(audit)


def _started_by_project(frame: types.FrameType | None, root: str) -> bool:
    """True when project code asked for it, so project code may run untraced there.
    Not when a library's import-time code did (`ctypes.util.find_library` running
    `ldconfig` while torch loads): an import frame comes before any project frame then."""
    while frame is not None:
        name = frame.f_code.co_filename
        if name.startswith("<frozen importlib"):
            return False
        if name.startswith(root) and THIRD_PARTY not in name:
            return True
        frame = frame.f_back
    return False


def _report(state: Any) -> dict[str, Any]:
    """What ran since the last report: {"units": ["path::Qual.name", ...], "escaped": bool}."""
    state.rearm()  # first: what runs from now on is recorded anew
    seen = state.seen
    # Popped one by one (each pop is atomic): what another thread adds meanwhile stays for
    # the next report instead of being lost.
    codes = [seen.pop(key) for key in list(seen)]
    units: set[str] = set()
    root = state.root
    real = state.realpaths  # code objects carry the path as imported (maybe via a symlink)
    own = _report.__code__.co_filename  # the drain itself runs in the actor too
    for code in codes:
        path = code.co_filename
        if path == own:
            continue
        if path not in real:
            real[path] = os.path.realpath(path) if os.path.isabs(path) else ""
        path = real[path]
        if path.startswith(root) and THIRD_PARTY not in path:
            rel = path[len(root) :].replace(os.sep, "/")
            units.add(rel + "::" + code.co_qualname.split(".<locals>", 1)[0])
    return {"units": sorted(units), "escaped": state.escaped}


def drain(_actor: object, module: str, expected_file: str) -> dict[str, Any] | None:
    """Called through `actor.__ray_call__`. None when this worker is not traced, or when the
    actor's class was imported from another file than the driver's (a copy of the checkout,
    another machine's path): what ran there cannot be named in the driver's terms. (A class
    pickled by value has no module here; its code keeps the driver's file names.)"""
    state = sys.modules.get(_STATE)
    if state is None or not state.intact():
        return None
    if module in sys.modules:
        path = getattr(sys.modules[module], "__file__", None)
        if not path or os.path.realpath(path) != expected_file:
            return None
    return _report(state)
