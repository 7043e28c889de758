"""Where one test's wall time goes, from inside every Python process of its run
(bench/long_test_phases.py puts this folder first on PYTHONPATH and sets LONG_TEST_LOG=FILE).

Every process (pytest, Ray's workers and actors) appends JSON lines to FILE:
  {"pid", "proc": 1, "create", "site", "argv"}   once: when the process was created (the
                                                  kernel's start time) and when Python ran this
  {"pid", "tid", "label", "start", "end", "depth", "what"?}   one per timed call
Timed: imports of the heavy packages (torch, transformers, nemo_rl, ray, tensorboard,
math_verify: the outermost import of each package in a thread), Ray start/join and shutdown,
pytest's setup / call / teardown of each test, the library's phases (policy workers'
start and stop, train / generate / logprobs / evaluate, checkpoint save and load, validation,
the reward environment, the logger, tokenizer and model loads, torch.distributed's start,
the CUDA context). `depth` is how many timed calls of the same thread were open: the reader
turns the spans into exclusive (self) times. Only timing is added; a sitecustomize this one
shadows still runs.
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
import threading
import time
from typing import Any

LOG = os.environ.get("LONG_TEST_LOG", "")
_local = threading.local()


def _write(rec: dict[str, Any]) -> None:
    fd = os.open(LOG, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (json.dumps(rec) + "\n").encode())  # one O_APPEND write: lines never mix
    finally:
        os.close(fd)


def _depth() -> int:
    return getattr(_local, "depth", 0)


class _Span:
    def __init__(self, label: str, what: str = "") -> None:
        self.label, self.what = label, what

    def __enter__(self) -> None:
        self.depth = _depth()
        _local.depth = self.depth + 1
        self.t0 = time.time()

    def __exit__(self, *exc: object) -> None:
        t1 = time.time()
        _local.depth = self.depth
        rec: dict[str, Any] = {"pid": os.getpid(), "tid": threading.get_ident(), "label": self.label,
                               "start": self.t0, "end": t1, "depth": self.depth}  # fmt: skip
        if self.what:
            rec["what"] = self.what
        _write(rec)


def _timed(label: str, fn: Any) -> Any:
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with _Span(label):
            return fn(*args, **kwargs)

    wrapper.__long_test_probe__ = True  # type: ignore[attr-defined]
    return wrapper


def _patch(owner: Any, name: str, label: str) -> None:
    raw = owner.__dict__.get(name) if isinstance(owner, type) else getattr(owner, name, None)
    if raw is None or getattr(raw, "__long_test_probe__", False):
        return
    if isinstance(raw, classmethod):
        setattr(owner, name, classmethod(_timed(label, raw.__func__)))
    elif isinstance(raw, staticmethod):
        setattr(owner, name, staticmethod(_timed(label, raw.__func__)))
    else:
        setattr(owner, name, _timed(label, raw))


# module -> [(attribute path, label)]: patched right after the module has been executed
PATCHES: dict[str, list[tuple[str, str]]] = {
    "ray": [("init", "Ray start/join (ray.init)"), ("shutdown", "Ray shutdown (ray.shutdown)")],
    "torch.cuda": [("_lazy_init", "CUDA context")],
    "torch.distributed.distributed_c10d": [("init_process_group", "torch.distributed init (gloo/NCCL)")],
    "transformers.modeling_utils": [("PreTrainedModel.from_pretrained", "model load (from_pretrained)")],
    "transformers.models.auto.tokenization_auto": [("AutoTokenizer.from_pretrained", "tokenizer load")],
    "nemo_rl.distributed.virtual_cluster": [("RayVirtualCluster.__init__", "placement group reserve")],
    "nemo_rl.distributed.worker_group": [
        ("RayWorkerGroup.__init__", "policy workers: start (rendezvous task, submit)"),
        ("wait_until_ready", "policy workers: wait for the actors' constructors"),
        ("RayWorkerGroup.shutdown", "policy workers: stop"),
    ],
    "nemo_rl.models.policy.policy": [
        ("start_policy", "policy start (start_policy; kept workers: their reinit)"),
        ("Policy.train", "train steps (Policy.train)"),
        ("Policy.generate", "generation (Policy.generate)"),
        ("Policy.get_logprobs", "reference logprobs (Policy.get_logprobs)"),
        ("Policy.evaluate", "validation loss (Policy.evaluate)"),
        ("Policy.save_checkpoint", "checkpoint save (Policy.save_checkpoint)"),
        ("Policy.load_checkpoint", "checkpoint load (Policy.load_checkpoint)"),
        ("Policy.info", "policy info"),
    ],
    "nemo_rl.models.policy.workers.dtensor_policy_worker": [
        ("DTensorPolicyWorker.__init__", "actor constructor (DTensorPolicyWorker)"),
        ("DTensorPolicyWorker.reinit", "actor reinit for a new run (DTensorPolicyWorker.reinit)"),
    ],
    "testharness.warm_workers": [
        ("preload", "warm worker: its imports (preload)"),
        ("prestart", "warm workers: ask the raylet (prestart)"),
    ],
    "_pytest.main": [("Session.perform_collect", "pytest collection")],
    "nemo_rl.algorithms.sft": [("validate", "validation (sft.validate)")],
    "nemo_rl.algorithms.grpo": [("validate", "validation (grpo.validate)")],
    "nemo_rl.environments.math_environment": [
        ("MathEnvironment.__init__", "reward env: start"),
        ("MathEnvironment.score", "reward env: score"),
        ("MathEnvironment.shutdown", "reward env: stop"),
        ("MathVerifierWorker.score", "reward env actor: score"),
    ],
    "nemo_rl.utils.logger": [
        ("Logger.__init__", "logger: open (TensorBoard writer)"),
        ("Logger.log", "logger: log a step (incl. GPU monitor)"),
        ("Logger.close", "logger: close"),
    ],
    "nemo_rl.utils.checkpoint": [("CheckpointManager.finalize", "checkpoint save (Policy.save_checkpoint)")],
}
IMPORT_ROOTS = ("torch", "transformers", "nemo_rl", "ray", "tensorboard", "math_verify", "sympy")


def _after_exec(module: Any) -> None:
    for path, label in PATCHES.get(module.__name__, []):
        owner: Any = module
        *parents, name = path.split(".")
        for p in parents:
            owner = getattr(owner, p)
        _patch(owner, name, label)
    if module.__name__ == "torch.distributed.distributed_c10d":  # the package re-exports it
        package: Any = sys.modules.get("torch.distributed")
        if package is not None:
            package.init_process_group = module.init_process_group
    if module.__name__ == "_pytest.runner":
        original = module.call_and_report

        @functools.wraps(original)
        def call_and_report(item: Any, when: str, *args: Any, **kwargs: Any) -> Any:
            with _Span(f"pytest {when}", item.nodeid):
                return original(item, when, *args, **kwargs)

        module.call_and_report = call_and_report


def _open_roots() -> set[str]:
    if not hasattr(_local, "roots"):
        _local.roots = set()
    return _local.roots  # type: ignore[no-any-return]


class _Finder(importlib.abc.MetaPathFinder):
    """Lets the normal finders load a module, then times or patches it."""

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        root = fullname.partition(".")[0]
        timed_import = root in IMPORT_ROOTS and root not in _open_roots()
        if not timed_import and fullname not in PATCHES and fullname != "_pytest.runner":
            return None
        later = sys.meta_path[sys.meta_path.index(self) + 1 :]  # another probe's finder wraps ours
        for finder in later:
            if not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is None:
                continue
            loader = spec.loader
            if loader is None or not hasattr(loader, "exec_module"):
                return spec
            exec_module = loader.exec_module

            def exec_and_patch(module: Any, _exec: Any = exec_module, _root: str = root) -> None:
                roots = _open_roots()
                if timed_import and _root not in roots:
                    roots.add(_root)
                    try:
                        with _Span(f"import {_root}"):
                            _exec(module)
                    finally:
                        roots.discard(_root)
                else:
                    _exec(module)
                try:
                    _after_exec(module)
                except Exception:  # noqa: BLE001  a changed library: time less, never break the run
                    pass

            try:
                loader.exec_module = exec_and_patch  # type: ignore[method-assign]
            except (AttributeError, TypeError):  # a loader that takes no attributes
                pass
            return spec
        return None


def _created() -> float:
    """When the kernel started this process (Linux: /proc's start time, in ticks since boot,
    set against CLOCK_BOOTTIME: /proc/stat's boot time has whole seconds only), else now."""
    try:
        with open("/proc/self/stat") as f:
            ticks = int(f.read().rpartition(")")[2].split()[19])
        age = time.clock_gettime(time.CLOCK_BOOTTIME) - ticks / os.sysconf("SC_CLK_TCK")
        return time.time() - age
    except (OSError, ValueError, IndexError, AttributeError):
        return time.time()


def _install() -> None:
    if not LOG:
        return
    site = time.time()
    _write({"pid": os.getpid(), "proc": 1, "create": _created(), "site": site, "argv": " ".join(sys.argv)[:200]})
    sys.meta_path.insert(0, _Finder())
    atexit.register(lambda: _write({"pid": os.getpid(), "exit": time.time()}))


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
