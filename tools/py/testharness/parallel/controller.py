"""`-n N`'s controller (testharness.parallel): plans the workers, starts or joins the run's
Ray cluster while they start, hands out the files (xdist_schedule.py) and stops the cluster it
started."""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from testharness import real_ray
from testharness.atomic_io import write_json_atomic
from testharness.barrier import done_marker
from testharness.contract import history_dir_of, is_xdist_worker, register_for, settings_of
from testharness.parallel.handover import CLUSTER_FILE, WORKERINPUT_KEY
from testharness.xdist_plan import files_to_run, gave_dist, workers_for


@dataclass
class _Run:
    workers: int
    shared_dir: Path
    address: str = ""
    started_here: bool = False  # this process started the cluster (and stops it)
    cluster: bool = False  # the workers share a cluster (its address comes in CLUSTER_FILE)
    gpus: int = 0
    durations: dict[str, float] | None = None  # recorded ({}: none); None: xdist's order


_RUN = pytest.StashKey[_Run]()


def _distributes(config: pytest.Config) -> bool:
    """This process is an xdist controller that will run tests in workers, of a project with
    [tool.testharness] (where the harness is merely installed, -n is xdist's alone)."""
    if is_xdist_worker(config) or not config.pluginmanager.hasplugin("xdist"):
        return False
    if config.getoption("dist", "no") == "no" or not config.getoption("numprocesses", 0):
        return False
    if config.option.collectonly or config.getoption("shard_plan", False):
        return False
    return settings_of(config).configured


def _gave_dist(config: pytest.Config) -> bool:
    return gave_dist([*config.invocation_params.args, *os.environ.get("PYTEST_ADDOPTS", "").split()])


# trylast: after pytest-testmon's configure, so its selection is known (the plugins that edit
# it are asked to do so first: pytest_testharness_plan_selection), and no worker or Ray
# cluster has started yet: the moment to plan.
@pytest.hookimpl(trylast=True)
def pytest_configure(config: pytest.Config) -> None:
    if not _distributes(config):
        return
    if _plan_workers(config):
        _register_controller(config)
    elif config.pluginmanager.get_plugin("dsession") is not None:
        config.pluginmanager.unregister(name="dsession")  # nothing to run: in-process, no Ray


def _register_controller(config: pytest.Config) -> None:
    """The controller's part: loadfile by default, the durations, the Ray cluster at session start."""
    if config.getoption("dist") == "load" and not _gave_dist(config):
        config.option.dist = "loadfile"  # module fixtures once per file (see above)
    workers = int(config.getoption("numprocesses"))
    config.stash[_RUN] = _Run(workers, Path(tempfile.mkdtemp(prefix="testharness_xdist_")))
    if config.getoption("dist") == "loadfile":
        config.stash[_RUN].durations = _recorded_durations(config)
        config.option.loadscopereorder = False  # keep the workers' order (below)
    register_for(config, _Controller(config.stash[_RUN]), "testharness-parallel")


def _plan_workers(config: pytest.Config) -> bool:
    """Plan first: no more workers than the files to run (testharness.xdist_plan: loadfile,
    the harness's default, hands out whole files). False: none to run, so no worker and no Ray
    cluster (the caller removes xdist's session; the session runs in-process)."""
    if _gave_dist(config) and config.getoption("dist") != "loadfile":
        return True  # a --dist the user chose hands out tests, not files: xdist's count stands
    testmon = config.pluginmanager.get_plugin("TestmonSelect")
    selecting = testmon is not None and getattr(getattr(config, "testmon_config", None), "select", False)
    if selecting:
        config.hook.pytest_testharness_plan_selection(config=config)  # e.g. files remote reach keeps
    files = files_to_run(
        config.args, config.invocation_params.dir, config.rootpath, config.getini("python_files"),
        config.getini("norecursedirs"), getattr(testmon, "deselected_files", ()) if selecting else (),
    )  # fmt: skip
    if files is None:
        return True
    files = {f for f in files if not _left_out(config, config.rootpath / f)}
    asked = int(config.getoption("numprocesses"))
    workers = workers_for(asked, len(files))
    if workers == asked:
        return True
    config.option.numprocesses = workers
    config.option.tx = ["popen"] * workers
    if workers == 0:  # pytest runs the (no) tests here
        config.option.dist = "no"
        reporter = config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            reporter.showfspath = True
        print("testharness: no test file to run: no xdist workers, no Ray cluster")
        return False
    print(f"testharness: {len(files)} test file(s) to run: {workers} xdist worker(s) instead of {asked}")
    return True


def _left_out(config: pytest.Config, path: Path) -> bool:
    """A file no test of which this run selects (e.g. the mcore files by default)."""
    return any(config.hook.pytest_testharness_file_left_out(config=config, path=path))


def _recorded_durations(config: pytest.Config) -> dict[str, float]:
    """Per test, its recorded duration in the results history ({} without history).

    Read once, here, and sent to every worker: xdist aborts a run whose workers collected
    different orders.
    """
    from testharness.history import load_history, planning_durations

    return planning_durations(load_history(history_dir_of(config), last=20).runs)


def _default_start(workers: int) -> str:
    import ray

    ray.init(address="local", include_dashboard=False)
    return str(ray.get_runtime_context().gcs_address)


class _NotMainThread(logging.Filter):
    """Drops Ray's warning that a driver started outside the main thread sets no SIGTERM
    handler: the harness keeps its own (pytest_testharness_reassert_signal_handlers)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "not the main thread" not in record.getMessage()


class _Controller:
    """Starts the run's cluster beside the workers' start-up: a new cluster is started in a
    thread while xdist spawns the workers and they import and collect (seconds each, in
    parallel); the workers read its address from CLUSTER_FILE before their first test. A
    cluster in RAY_ADDRESS (or one this process already joined) is joined at once.

    The thread lives until the cluster is stopped: Ray binds the processes it starts to the
    thread that started them (PR_SET_PDEATHSIG fires when that thread ends)."""

    def __init__(self, run: _Run) -> None:
        self.run = run
        self.starting: threading.Thread | None = None
        self.ready = threading.Event()  # the start's outcome is known
        self.stopped = threading.Event()  # the cluster is stopped: the start thread may end
        self.failure = ""

    @pytest.hookimpl(tryfirst=True)  # before xdist's own sessionstart spawns the workers
    def pytest_sessionstart(self, session: pytest.Session) -> None:
        run, config = self.run, session.config
        ray, why_not = real_ray.load()
        if ray is None:  # everything but the shared cluster works without Ray
            print(
                f"testharness: {run.workers} xdist workers without a shared Ray cluster ({why_not}); {self._order(config)}"
            )
            return
        run.cluster = True
        if os.environ.get("RAY_ADDRESS") or ray.is_initialized():
            self._connect(ray, config)
            self._announce(config)
        else:
            self.starting = threading.Thread(target=self._start, args=(ray, config), name="testharness-ray-start")
            self.starting.start()

    @pytest.hookimpl(tryfirst=True)  # before xdist's loop hands out the first test
    def pytest_runtestloop(self, session: pytest.Session) -> None:
        if self.starting is not None:
            self.ready.wait()
            self._announce(session.config)

    def _start(self, ray: Any, config: pytest.Config) -> None:
        quiet = _NotMainThread()
        logging.getLogger("ray._private.worker").addFilter(quiet)
        try:
            self._connect(ray, config)
        finally:
            logging.getLogger("ray._private.worker").removeFilter(quiet)
        self.stopped.wait()

    def _connect(self, ray: Any, config: pytest.Config) -> None:
        """Start (or join) the cluster and connect this process; the outcome goes to
        CLUSTER_FILE, where the workers wait for it (a failure too: they stop waiting)."""
        run = self.run
        before = dict(os.environ)
        try:
            was_connected = ray.is_initialized()
            address = (
                os.environ.get("RAY_ADDRESS")
                or config.hook.pytest_testharness_start_ray(config=config, workers=run.workers)
                or _default_start(run.workers)
            )
            if not ray.is_initialized():
                ray.init(address=address, log_to_driver=False)
            run.started_here = not was_connected and not os.environ.get("RAY_ADDRESS")
            run.gpus = real_ray.cluster_gpus(ray)
            # What Ray's start set in this process's environment (RAY_AUTH_MODE=token: a new
            # cluster asks its drivers for its token): workers spawned after the start
            # inherited it, these may have been spawned before.
            env = {k: v for k, v in os.environ.items() if k.startswith("RAY_") and before.get(k) != v}
            outcome: dict[str, Any] = {"address": address, "gpus": run.gpus, "env": env}
            run.address = address
        except BaseException as exc:  # noqa: BLE001  a thread: the failure is reported by _announce
            self.failure = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            outcome = {"error": self.failure}
        write_json_atomic(run.shared_dir / CLUSTER_FILE, outcome)
        self.ready.set()

    def _announce(self, config: pytest.Config) -> None:
        if self.failure:
            pytest.exit(f"testharness: could not start the Ray cluster for -n: {self.failure}", returncode=3)
        os.environ["RAY_ADDRESS"] = self.run.address  # what this process starts later joins it too
        config.hook.pytest_testharness_reassert_signal_handlers(config=config)  # ray.init replaced SIGTERM's
        where = "started" if self.run.started_here else "joined"
        print(f"testharness: {self.run.workers} xdist workers share the Ray cluster {where} at {self.run.address} "
              f"({self.run.gpus} GPU(s)); {self._order(config)}")  # fmt: skip

    def _order(self, config: pytest.Config) -> str:
        order = f"files are distributed with --dist {config.getoption('dist')}"
        if self.run.durations is not None:
            order += (
                ", longest first by their recorded durations" if self.run.durations else ", largest first (no history)"
            )
        return order

    def pytest_configure_node(self, node: Any) -> None:  # xdist: what each worker receives
        node.workerinput[WORKERINPUT_KEY] = {
            "dir": str(self.run.shared_dir), "cluster": self.run.cluster, "durations": self.run.durations}  # fmt: skip

    def pytest_xdist_make_scheduler(self, config: pytest.Config, log: Any) -> Any:
        if config.getoption("dist") != "loadfile":
            return None  # xdist's own
        from testharness.xdist_schedule import make_scheduler  # deferred: -n's alone (~8 ms with shard_plan)

        return make_scheduler(config, log, self.run.durations, self.run.shared_dir)

    def pytest_handlecrashitem(self, crashitem: str, report: Any, sched: Any) -> None:
        # A test that killed its worker has finished: no worker waits on it at the barrier.
        done_marker(self.run.shared_dir, crashitem).touch()

    def pytest_unconfigure(self, config: pytest.Config) -> None:
        if self.starting is not None:  # a run interrupted while the cluster started: stop it all the same
            self.ready.wait()
        shutil.rmtree(self.run.shared_dir, ignore_errors=True)
        ray = real_ray.imported()
        if self.run.started_here and ray is not None:
            real_ray.stop_cluster(ray)  # the cluster this process started
            os.environ.pop("RAY_ADDRESS", None)
        self.stopped.set()
        if self.starting is not None:
            self.starting.join()
