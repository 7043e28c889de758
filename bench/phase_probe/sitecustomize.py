"""Phase timings of a suite run, from inside every Python process of it (bench/suite_time.py).

Put this folder first on PYTHONPATH and set PHASE_LOG=FILE: every process of the run (pytest,
its xdist workers, Ray workers, the tests' own subprocesses) then appends one JSON line per
timed call to FILE: {"phase", "start", "end", "pid"}. Timed: Ray start/join (ray.init), CUDA
context creation (torch.cuda's lazy init), torch.distributed start (init_process_group;
NCCL or gloo), model load (from_pretrained), worker-group start and shutdown (the driver's
wait for the actors), the life of every nested pytest process (pytester subprocesses), and
every test's protocol with its node id ("what": the run's timeline).

For the cost of each test (bench/harness_suite_costs.py), every record also names the test
whose protocol was running when its process (or an ancestor) started ("test": an outer test
sets PHASE_TEST while it runs, which its subprocesses, their Ray clusters and Ray's workers
inherit), sleeps of 50 ms or more on a main thread are timed, and every process logs its
life and CPU seconds at exit ("process life", with "kind": nested pytest, xdist worker, Ray
worker, Ray daemon or other; processes killed by a signal log none).
Nothing is changed but the timing; another sitecustomize on the path is still run.
"""

from __future__ import annotations

import atexit
import functools
import importlib.abc
import importlib.machinery
import importlib.util
import json
import os
import sys
import time
from typing import Any

LOG = os.environ.get("PHASE_LOG", "")


def _record(phase: str, start: float, end: float, what: str = "", **extra: Any) -> None:
    rec: dict[str, Any] = {"phase": phase, "start": start, "end": end, "pid": os.getpid(), **extra}
    if what:
        rec["what"] = what
    test = os.environ.get("PHASE_TEST")
    if test:
        rec["test"] = test
    line = json.dumps(rec) + "\n"
    try:
        fd = os.open(LOG, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line.encode())  # one short O_APPEND write: lines from many processes never mix
        finally:
            os.close(fd)
    except OSError:  # a test's own limit (RLIMIT_FSIZE, a full disk) is its to meet, not the probe's
        pass


def _timed(phase: str, fn: Any, min_s: float = 0.0) -> Any:
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        t0 = time.time()
        try:
            return fn(*args, **kwargs)
        finally:
            t1 = time.time()
            if t1 - t0 >= min_s:
                _record(phase, t0, t1)

    return wrapper


def _patch_method(cls: Any, name: str, phase: str) -> None:
    raw = cls.__dict__.get(name)
    if isinstance(raw, classmethod):
        setattr(cls, name, classmethod(_timed(phase, raw.__func__)))
    elif raw is not None:
        setattr(cls, name, _timed(phase, raw))


def _after_import(module: Any) -> None:
    name = module.__name__
    if name == "ray" and hasattr(module, "init"):
        module.init = _timed("ray start/join (ray.init)", module.init)
    elif name == "torch.cuda":
        module._lazy_init = _timed("CUDA context", module._lazy_init, min_s=0.001)
    elif name == "torch.distributed.distributed_c10d":
        module.init_process_group = _timed("torch.distributed init (NCCL/gloo)", module.init_process_group)
        package: Any = sys.modules.get("torch.distributed")
        if package is not None:
            package.init_process_group = module.init_process_group
    elif name == "transformers.modeling_utils":
        _patch_method(module.PreTrainedModel, "from_pretrained", "model load (from_pretrained)")
    elif name == "_pytest.runner":
        module.runtestprotocol = _timed_test(module.runtestprotocol)
    elif name == "nemo_rl.distributed.worker_group":
        _patch_method(module.RayWorkerGroup, "__init__", "actor spawn until ready (worker group)")
        _patch_method(module.RayWorkerGroup, "shutdown", "actor teardown (worker group)")


def _timed_test(fn: Any) -> Any:
    """Each test's whole protocol (setup, call, teardown), with its node id: the timeline."""

    @functools.wraps(fn)
    def wrapper(item: Any, *args: Any, **kwargs: Any) -> Any:
        t0 = time.time()
        outer = os.environ.get("PHASE_TEST")
        if outer is None:  # an outer test: what it starts is charged to it
            os.environ["PHASE_TEST"] = item.nodeid
        try:
            return fn(item, *args, **kwargs)
        finally:
            if outer is None:
                os.environ.pop("PHASE_TEST", None)
            _record(TEST_PHASE, t0, time.time(), item.nodeid)

    return wrapper


TEST_PHASE = "test (setup to teardown)"
TARGETS = {"ray", "torch.cuda", "torch.distributed.distributed_c10d", "transformers.modeling_utils",
           "nemo_rl.distributed.worker_group", "_pytest.runner"}  # fmt: skip


class _Finder(importlib.abc.MetaPathFinder):
    """Lets the normal finders load a target module, then times its functions."""

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname not in TARGETS:
            return None
        later = sys.meta_path[sys.meta_path.index(self) + 1 :]  # another probe's finder wraps ours
        for finder in later:
            if not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None and spec.loader is not None:
                exec_module = spec.loader.exec_module

                def exec_and_patch(module: Any, _exec: Any = exec_module) -> None:
                    _exec(module)
                    try:
                        _after_import(module)
                    except Exception:  # noqa: BLE001  a changed library: time less, never break the run
                        pass

                spec.loader.exec_module = exec_and_patch  # type: ignore[method-assign]
                return spec
        return None


def _timed_sleep(sleep: Any) -> Any:
    """time.sleep on a main thread, 50 ms or more: a test's polls and fixed waits (not
    subprocess's own poll, with which Popen.wait(timeout) waits for a child)."""
    import threading

    @functools.wraps(sleep)
    def wrapper(seconds: float) -> None:
        if (
            seconds < 0.05
            or threading.current_thread() is not threading.main_thread()
            or sys._getframe(1).f_code.co_filename.endswith("subprocess.py")
        ):
            return sleep(seconds)  # type: ignore[no-any-return]
        t0 = time.time()
        try:
            sleep(seconds)
        finally:
            _record("sleep (main thread)", t0, time.time())

    return wrapper


def _argv() -> str:
    """The whole command line: at this point sys.argv of `python -m pytest` is only ['-m', ...]."""
    return " ".join(getattr(sys, "orig_argv", sys.argv))


def _kind() -> str:
    argv = _argv()
    if "default_worker.py" in argv:
        return "Ray worker"
    if "ray" in argv and any(d in argv for d in ("dashboard", "monitor.py", "log_monitor", "runtime_env")):
        return "Ray daemon"
    if _nested_pytest():
        return "nested pytest"
    if sys.argv[:1] == ["-c"] and os.environ.get("PHASE_IN_PYTEST") == "1":
        return "xdist worker or python -c"
    return "other python"


def _log_life() -> None:
    began = time.time()
    kind = _kind()

    def at_exit() -> None:
        cpu = os.times()
        _record("process life", began, time.time(), kind=kind, cpu=cpu.user + cpu.system)

    atexit.register(at_exit)


def _nested_pytest() -> bool:
    argv = _argv()
    return "pytest" in argv and os.environ.get("PHASE_IN_PYTEST") == "1"


def _install() -> None:
    if not LOG:
        return
    sys.meta_path.insert(0, _Finder())
    time.sleep = _timed_sleep(time.sleep)
    if os.environ.get("PHASE_TEST"):  # a process some test started, at any depth
        _log_life()
    if _nested_pytest():  # a pytest started by a test: time its whole life
        began = time.time()
        atexit.register(lambda: _record("pytester subprocess (nested pytest)", began, time.time()))
    elif "pytest" in _argv():
        os.environ["PHASE_IN_PYTEST"] = "1"  # the outer run's children are the nested ones


def _chain() -> None:
    """Run the sitecustomize this one shadows, if any: the next one on the path (only those
    after this folder, so that two probes on the path run once each)."""
    here = os.path.dirname(os.path.abspath(__file__))
    dirs = [os.path.abspath(p or ".") for p in sys.path]
    path = sys.path[dirs.index(here) + 1 :] if here in dirs else sys.path
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", path)
    if spec is not None and spec.loader is not None:
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)


_install()
_chain()
