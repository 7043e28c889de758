"""`-n N`'s workers (testharness.parallel): each joins the controller's Ray cluster before its
first test, keeps run_first tests in front (barrier.py), holds GPUs around a `uses_cuda` test
(gpu_lease.py) and ends without the interpreter's finalization."""

from __future__ import annotations

import atexit
import json
import os
import sys
import uuid
from collections.abc import Generator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from testharness import real_ray
from testharness.atomic_io import write_json_atomic
from testharness.barrier import RUN_FIRST_TIMEOUT_S, done_marker, wait_for_markers
from testharness.contract import is_xdist_worker
from testharness.parallel.handover import CLUSTER_FILE, WORKER_PLUGIN, WORKERINPUT_KEY


@pytest.hookimpl(trylast=True)  # as the controller's: every plugin configured
def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "uses_cuda: uses GPUs outside Ray's accounting (CUDA in the test process, or a child "
        "with its own Ray); under -n it holds a share of a one-GPU node, every GPU of a larger one",
    )
    if is_xdist_worker(config) and WORKERINPUT_KEY in config.workerinput:  # type: ignore[attr-defined]
        spec = config.workerinput[WORKERINPUT_KEY]  # type: ignore[attr-defined]
        # deferred, here and below: only a worker of the harness's -n uses gpu_lease, shard_plan, xdist_schedule
        from testharness.gpu_lease import lease_timeout_s

        config.pluginmanager.register(
            _Worker(Path(spec["dir"]), bool(spec["cluster"]), lease_timeout_s(dict(os.environ)), spec["durations"]),
            WORKER_PLUGIN,
        )


# tryfirst: outside every unmarked wrapper, so their end of the session has run (supervised's,
# also tryfirst and outside this one, does nothing in a worker).
@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_cmdline_main(config: pytest.Config) -> Generator[None, Any, Any]:
    code = yield
    if is_xdist_worker(config) and WORKERINPUT_KEY in config.workerinput:  # type: ignore[attr-defined]
        _end_worker(code)
    return code


def _end_worker(code: object) -> None:
    """End an xdist worker whose session is over without the interpreter's finalization: with
    torch and transformers imported it takes a second or more, and the controller waits for
    the process to end before it reports. Everything the worker had to say went out with
    xdist's "workerfinished" (results, coverage data); the exit handlers (Ray's disconnect,
    pytest's temporary folders) still run."""
    atexit._run_exitfuncs()  # CPython's: the handlers, once, as at a normal exit
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code if isinstance(code, int) else 0)


def _inherit(env: dict[str, str]) -> None:
    """Take the variables Ray's start set in the controller, as if this worker had been
    spawned after it. Ray reads them once, when it is imported (collection imported it here):
    a changed RAY_AUTH_MODE is read again (Ray's own `Config.initialize("")`, what it does
    after setting it in the process that starts a cluster)."""
    changed = {k: v for k, v in env.items() if k not in os.environ}
    os.environ.update(changed)
    if "RAY_AUTH_MODE" in changed:
        real_ray.reread_settings()


@dataclass
class _Worker:
    shared_dir: Path
    cluster: bool  # the controller starts or joins a cluster: wait for its address
    lease_timeout_s: float
    durations: dict[str, float] | None
    run_first: list[str] = field(default_factory=list)
    gpus: int = 0
    address: str | None = None

    def await_cluster(self) -> str | None:
        """The shared cluster's address, from CLUSTER_FILE (waited for: the controller starts
        the cluster while the workers start); exported as RAY_ADDRESS for every ray.init here."""
        if not self.cluster or self.address is not None:
            return self.address
        path, controller = self.shared_dir / CLUSTER_FILE, os.getppid()
        # No deadline of ours: the controller's start-up has one. Each second, check that the
        # controller is still there (if it is gone, so is the run).
        while wait_for_markers([path], 1.0, poll_s=0.02):
            if os.getppid() != controller:
                return None
        outcome = json.loads(path.read_text())
        self.cluster = False  # read once
        if "address" in outcome:
            self.address, self.gpus = str(outcome["address"]), int(outcome["gpus"])
            _inherit(outcome["env"])
            os.environ["RAY_ADDRESS"] = self.address
        return self.address

    @pytest.hookimpl(tryfirst=True)  # before xdist's worker loop runs the first test
    def pytest_runtestloop(self, session: pytest.Session) -> None:
        self.await_cluster()

    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        # Before selection's run_first order (trylast), which stays first.
        if self.durations is not None:
            from testharness.shard_plan import longest_files_first

            order = longest_files_first([item.nodeid for item in items], self.durations)
            position = {nodeid: i for i, nodeid in enumerate(order)}
            items.sort(key=lambda item: position[item.nodeid])

    @pytest.hookimpl(tryfirst=True)  # written before xdist tells the controller it collected
    def pytest_collection_finish(self, session: pytest.Session) -> None:
        self.run_first = [i.nodeid for i in session.items if i.get_closest_marker("run_first")]
        if self.durations:  # the controller schedules the files itself (LongestFirstScheduling)
            from testharness.xdist_schedule import RUN_FIRST_FILES

            files = sorted({nodeid.split("::", 1)[0] for nodeid in self.run_first})
            write_json_atomic(self.shared_dir / RUN_FIRST_FILES, files)  # the same from every worker

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item, nextitem: pytest.Item | None) -> Generator[None, Any, Any]:
        is_first = item.nodeid in self.run_first
        if self.run_first and not is_first:
            markers = [done_marker(self.shared_dir, n) for n in self.run_first]
            wait_for_markers(markers, RUN_FIRST_TIMEOUT_S)
        release = self._hold_gpus(item) if item.get_closest_marker("uses_cuda") and self.gpus else None
        try:
            return (yield)
        finally:
            if release is not None:
                release.touch()  # the lease actor sees it and ends, freeing the GPUs
            if is_first:
                done_marker(self.shared_dir, item.nodeid).touch()

    def _hold_gpus(self, item: pytest.Item) -> Path | None:
        from testharness.gpu_lease import hold_node_gpus

        release = self.shared_dir / f"gpu_lease_{uuid.uuid4().hex}.release"
        try:
            return release if hold_node_gpus(self.lease_timeout_s, release) else None
        except TimeoutError as exc:
            item.add_marker(pytest.mark.skip(reason=f"uses_cuda: {exc}"))  # reported, never silent
            return None
