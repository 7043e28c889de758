"""Run-time record of what each test sent to other processes (the "precision" record).

pytest-testmon sees the code a test runs in the pytest process. What it cannot see is
code run elsewhere: Ray actors, Ray tasks, subprocesses. This recorder notes, per test,

  * the project modules of the actor classes it created and called, the remote functions
    it submitted, and the project objects it sent along (arguments, `ray.put` values:
    unpickling them runs their classes' code in the worker); and
  * whether it started a process some other way (subprocess, fork, multiprocessing), in
    which case nothing precise can be said and the test is "opaque".

The selector then uses the import closure of those modules instead of the test file's
whole static closure. Ray's own service processes (started inside the `ray` package, e.g.
by `ray.init`) are not the test's code and do not make it opaque.

Events are charged to every *owner* on a stack: the running test and any fixture being set
up inside it. A test's reach is its own events plus those of every fixture it requests
(`item.fixturenames`), so a worker created once by a module-scoped fixture is charged to
every test that uses it. A Ray event with no owner (an actor created at import time) makes
the whole session's records opaque; a process started with no owner is ignored. Ray is patched only once it is imported (a post-import
hook), so a run that never imports Ray never pays for it.
"""

from __future__ import annotations

import functools
import importlib.abc
import importlib.machinery
import os
import sys
import sysconfig
import types
from collections.abc import Callable, Iterable
from itertools import islice
from typing import Any

_WATCHED_EVENTS = frozenset(
    {"subprocess.Popen", "os.system", "os.exec", "os.posix_spawn", "os.spawn", "os.fork", "os.forkpty"}
)
_STDLIB = sysconfig.get_paths()["stdlib"] + os.sep
_HARNESS_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
_MAX_DEPTH = 4  # how deep arguments are searched for project objects
_MAX_ITEMS = 256  # entries looked at per container


class Bucket:
    """What one owner (a test or a fixture) reached."""

    __slots__ = ("files", "opaque")

    def __init__(self) -> None:
        self.files: set[str] = set()
        self.opaque = False


class ReachRecorder:
    """Collects reach per owner; `reach_of` combines a test's own and its fixtures'."""

    def __init__(self, root: str) -> None:
        self.root = os.path.realpath(root)
        self.stack: list[Bucket] = []
        self.tests: dict[str, Bucket] = {}
        self.fixtures: dict[str, Bucket] = {}
        self.session_opaque = False
        self._module_file: dict[str, str | None] = {}
        self._ray_dir: str | None = None
        self._installed = False
        self._originals: list[tuple[Any, str, Any]] = []

    # -- owners ----------------------------------------------------------------------
    def push_test(self, nodeid: str) -> None:
        self.stack.append(self.tests.setdefault(nodeid, Bucket()))

    def push_fixture(self, argname: str) -> None:
        self.stack.append(self.fixtures.setdefault(argname, Bucket()))

    def pop(self) -> None:
        if self.stack:
            self.stack.pop()

    def reach_of(self, nodeid: str, fixturenames: Iterable[str]) -> list[str] | None:
        """Sorted repo-relative files this test reached remotely, or None when opaque."""
        if self.session_opaque:
            return None
        buckets = [self.tests.get(nodeid, Bucket())] + [self.fixtures[f] for f in fixturenames if f in self.fixtures]
        if any(b.opaque for b in buckets):
            return None
        return sorted(set().union(*(b.files for b in buckets)))

    # -- events ----------------------------------------------------------------------
    def _charge(self, files: set[str], opaque: bool = False) -> None:
        if not files and not opaque:
            return
        if not self.stack:
            self.session_opaque = True
            return
        for bucket in self.stack:
            bucket.files |= files
            bucket.opaque = bucket.opaque or opaque

    def note_remote(self, modules: Iterable[str | None], *values: Any) -> None:
        """Code of `modules` runs remotely, with `values` (arguments) sent along."""
        if self._ignored(sys._getframe(1), process=False):
            return
        files: set[str] = set()
        for name in modules:
            if name not in sys.modules:  # code we cannot place (a class from another driver)
                self._charge(set(), opaque=True)
            self._add_module(name, files)
        seen: set[int] = set()
        for value in values:
            self._scan(value, _MAX_DEPTH, files, seen)
        self._charge(files)

    def note_process(self) -> None:
        """A process was started: unless Ray or the harness started it, the test is opaque.

        Outside any test (collection, session start and end) it is nobody's: third-party
        imports run `ldconfig` and the like, and the import-time code that could start one
        is covered by the import digests anyway."""
        if self.stack and not self._ignored(sys._getframe(1), process=True):
            self._charge(set(), opaque=True)

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

    def _add_module(self, name: str | None, files: set[str]) -> bool:
        """Add the project file of module `name`; False for third-party and unknown names."""
        if not name:
            return False
        try:
            rel = self._module_file[name]
        except KeyError:
            rel = self._module_file[name] = self._file_of(name)
        if rel:
            files.add(rel)
        return rel is not None

    def _file_of(self, name: str) -> str | None:
        """Repo-relative path of an imported module, None for third-party and built-ins."""
        module = sys.modules.get(name)
        path = getattr(module, "__file__", None)
        if not path:
            return None
        real = os.path.realpath(path)
        if not real.startswith(self.root + os.sep) or f"{os.sep}site-packages{os.sep}" in real:
            return None
        return os.path.relpath(real, self.root).replace(os.sep, "/")

    def _scan(self, value: Any, depth: int, files: set[str], seen: set[int]) -> None:
        """Add the project modules whose code unpickling/calling `value` may run."""
        if depth < 0 or id(value) in seen:
            return
        seen.add(id(value))
        if isinstance(value, type):
            self._add_module(value.__module__, files)
            return
        if isinstance(value, (types.FunctionType, types.BuiltinFunctionType)):
            self._add_module(getattr(value, "__module__", None), files)
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
            for k, v in islice(value.items(), _MAX_ITEMS):
                self._scan(k, depth - 1, files, seen)
                self._scan(v, depth - 1, files, seen)
            return
        if isinstance(value, (list, tuple, set, frozenset)):
            for v in islice(value, _MAX_ITEMS):
                self._scan(v, depth - 1, files, seen)
            return
        if self._add_module(type(value).__module__, files):
            # A project object: what it holds is unpickled (and maybe run) remotely too.
            attrs = getattr(value, "__dict__", None)
            if isinstance(attrs, dict):
                for v in islice(attrs.values(), _MAX_ITEMS):
                    self._scan(v, depth - 1, files, seen)

    # -- hooks -----------------------------------------------------------------------
    def install(self) -> None:
        """Audit hook and multiprocessing patch now; Ray patches when Ray is imported."""
        if self._installed:
            return
        self._installed = True
        recorder = self

        def audit(event: str, args: tuple[Any, ...]) -> None:
            if event in _WATCHED_EVENTS and recorder._installed:
                recorder.note_process()

        sys.addaudithook(audit)  # cannot be removed: `uninstall` makes it inert
        import multiprocessing.process as mp_process

        self._wrap(mp_process.BaseProcess, "start", lambda process, *a, **k: recorder.note_process())
        if "ray" in sys.modules and hasattr(sys.modules["ray"], "put"):
            self._patch_ray()
        else:
            sys.meta_path.insert(0, _AfterImport("ray", self._patch_ray, self))

    def uninstall(self) -> None:
        self._installed = False
        for finder in [f for f in sys.meta_path if isinstance(f, _AfterImport) and f.owner is self]:
            sys.meta_path.remove(finder)
        while self._originals:  # newest first, so nested recorders unwind correctly
            owner, attr, original = self._originals.pop()
            setattr(owner, attr, original)

    def _patch_ray(self) -> None:
        import ray
        import ray.actor
        import ray.remote_function

        # As in code objects: the path the module was imported from (not resolved).
        self._ray_dir = os.path.dirname(os.path.abspath(ray.__file__)) + os.sep
        recorder = self

        def on_create(actor_class: Any, args: Any = None, kwargs: Any = None, *_: Any, **__: Any) -> None:
            cls = getattr(getattr(actor_class, "__ray_metadata__", None), "modified_class", None)
            recorder.note_remote([getattr(cls, "__module__", None) or type(actor_class).__module__], args, kwargs)

        def on_call(handle: Any, method_name: str, args: Any = None, kwargs: Any = None, *_: Any, **__: Any) -> None:
            descriptor = getattr(handle, "_ray_actor_creation_function_descriptor", None)
            recorder.note_remote([getattr(descriptor, "module_name", None)], args, kwargs)

        def on_task(function: Any, args: Any = None, kwargs: Any = None, *_: Any, **__: Any) -> None:
            recorder.note_remote([getattr(getattr(function, "_function", None), "__module__", None)], args, kwargs)

        self._wrap(ray.actor.ActorClass, "_remote", on_create)
        self._wrap(ray.actor.ActorHandle, "_actor_method_call", on_call)
        self._wrap(ray.remote_function.RemoteFunction, "_remote", on_task)
        self._wrap(ray, "put", lambda value, *a, **k: recorder.note_remote([], value))

    def _wrap(self, owner: Any, attr: str, before: Callable[..., None]) -> None:
        """Call `before(*args)` ahead of `owner.attr`; if `before` fails, the owners go opaque."""
        original = getattr(owner, attr)
        recorder = self

        @functools.wraps(original)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            try:
                before(*args, **kwargs)
            except Exception:  # noqa: BLE001  never break the call; an unknown reach means the static closure
                recorder._charge(set(), opaque=True)
            return original(*args, **kwargs)

        self._originals.append((owner, attr, original))
        setattr(owner, attr, wrapper)


class _AfterImport(importlib.abc.MetaPathFinder):
    """Calls `callback` once the top-level package `name` has finished importing."""

    def __init__(self, name: str, callback: Callable[[], None], owner: object) -> None:
        self.name = name
        self.callback = callback
        self.owner = owner

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if fullname != self.name:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        loader = getattr(spec, "loader", None)
        if spec is None or loader is None or not hasattr(loader, "exec_module"):
            return None
        exec_module = loader.exec_module
        finder = self

        def exec_then_patch(module: types.ModuleType) -> None:
            exec_module(module)
            if finder in sys.meta_path:
                sys.meta_path.remove(finder)
            finder.callback()

        loader.exec_module = exec_then_patch
        return spec
