"""`-n N` (pytest-xdist): every worker on ONE Ray cluster, GPUs handed out by Ray.

In a project with `[tool.testharness]` (where the harness is merely installed, `-n` is
xdist's alone: no cluster, no scheduling of ours), the controller (the process that runs
`pytest -n N`) starts the Ray cluster while xdist spawns its workers and they collect, or
joins the one in RAY_ADDRESS; every worker exports its address as RAY_ADDRESS before its
first test (`shared_ray_address(config)` for a conftest that needs it sooner), so every
worker's `ray.init()` joins it and Ray's resource accounting places every actor of every
test (a GPU actor waits for a free GPU; two never share one). The controller stops the
cluster it started when the run ends. How to start it is the project's choice: implement
`pytest_testharness_start_ray(config, workers)` in a conftest (return the address) to use
its own start-up (retries, sizing); otherwise `ray.init(address="local")`. It runs in a
thread of the controller while the workers start: they get the address and the RAY_*
variables Ray's start set, not other changes the hook makes to the environment. Without
Ray (not installed, blocked, or a stand-in in sys.modules["ray"]: real_ray) the workers run
with no shared cluster, as the controller's line says; everything else below still holds.

Placement of what Ray does not see:

- `@pytest.mark.uses_cuda`: the test uses GPUs outside Ray's accounting (CUDA in the test
  process, or a child process with a Ray cluster of its own). Under -n, when this node has
  GPUs, the test holds them in the shared cluster while it runs (a zero-CPU placeholder actor
  asking for them), so Ray counts what it uses: a quarter of a one-GPU node (tests share that
  GPU, as fractional actors do; the tracker then reads each test's own processes), every GPU
  of a larger node (no actor of another test is placed on a GPU it uses). It waits for them
  like an actor would (TESTHARNESS_GPU_LEASE_TIMEOUT_S, 600).
- `@pytest.mark.run_first`: under -n no other test starts before every selected run_first
  test has finished (they are first in every worker's queue, so none waits on itself).

Module and session fixtures are built once per worker: by default the controller
distributes whole test files (`--dist loadfile`; pass `--dist` to choose), so a module
fixture (a policy worker holding a GPU) lives on one worker and never waits on a copy of
itself on another. Files are handed out longest first by their tests' recorded durations
(results history, as shards are planned; without it, by number of tests as xdist does): the
longest file starts at once instead of being the run's tail. The workers order the files and
run_first tests stay in front: a worker never waits at the barrier for a file still queued.
With recorded durations the harness also schedules the files itself (`next_file`): a worker
gets its next file when one test of its current file is left (xdist's own schedule: two), and
a worker still busy with a long test gets the shortest file waiting rather than the longest,
so no long file queues behind a long test while other workers fall idle.

A test that kills its worker (segfault, `os._exit`, SIGKILL) is recorded failed, once ("worker
'gwN' crashed while running ..."); xdist replaces the worker, and the rest of that file runs on
the next worker free, each test once; the crashed test is not run again, and a crashed
run_first test counts as finished. The run goes on and exits 1. (With loadfile the harness
always uses its own scheduler, xdist_schedule.py, which says what xdist's own does instead.)
Each crash uses up one of xdist's --max-worker-restart (default 4 per worker).

Results, metrics, testmon and sharding under -n are the other plugins' business (the
controller writes; workers send what they measured with their reports).
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import shutil
import sys
import tempfile
import threading
import uuid
from collections.abc import Generator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from testharness import real_ray
from testharness.atomic_io import write_json_atomic
from testharness.barrier import RUN_FIRST_TIMEOUT_S, done_marker, wait_for_markers
from testharness.contract import history_dir_of, is_xdist_worker, settings_of
from testharness.gpu_lease import hold_node_gpus, lease_timeout_s
from testharness.interrupts import reassert_signal_handlers
from testharness.remote_select.plugin import started as remote_select_started
from testharness.selection import file_left_out
from testharness.shard_plan import longest_files_first
from testharness.xdist_plan import files_to_run, workers_for
from testharness.xdist_schedule import RUN_FIRST_FILES, make_scheduler

WORKERINPUT_KEY = "testharness_parallel"
CLUSTER_FILE = "ray_cluster.json"  # in the run's shared folder: {"address", "gpus"} or {"error"}


class StartRaySpec:
    @pytest.hookspec(firstresult=True)
    def pytest_testharness_start_ray(self, config: pytest.Config, workers: int) -> str | None:
        """Start (or join) the Ray cluster that the `workers` xdist workers of this run share,
        in this process; return its address. None: the harness starts a default one."""


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    pluginmanager.add_hookspecs(StartRaySpec)


# --- the controller ------------------------------------------------------------------------


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
    args = [*config.invocation_params.args, *os.environ.get("PYTEST_ADDOPTS", "").split()]
    return any(a == "-d" or a.startswith("--dist") for a in args)


# trylast: after pytest-testmon's configure, so its selection is known (remote-aware
# selection's is asked for: remote_select.plugin.started), and no worker or Ray cluster has
# started yet: the moment to plan.
@pytest.hookimpl(trylast=True)
def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "uses_cuda: uses GPUs outside Ray's accounting (CUDA in the test process, or a child "
        "with its own Ray); under -n it holds a share of a one-GPU node, every GPU of a larger one",
    )
    if _distributes(config):
        if _plan_workers(config):
            _register_controller(config)
        elif config.pluginmanager.get_plugin("dsession") is not None:
            config.pluginmanager.unregister(name="dsession")  # nothing to run: in-process, no Ray
    elif is_xdist_worker(config) and WORKERINPUT_KEY in config.workerinput:  # type: ignore[attr-defined]
        spec = config.workerinput[WORKERINPUT_KEY]  # type: ignore[attr-defined]
        config.pluginmanager.register(
            _Worker(Path(spec["dir"]), bool(spec["cluster"]), lease_timeout_s(dict(os.environ)), spec["durations"]),
            WORKER_PLUGIN,
        )


def _register_controller(config: pytest.Config) -> None:
    """The controller's part: loadfile by default, the durations, the Ray cluster at session start."""
    if config.getoption("dist") == "load" and not _gave_dist(config):
        config.option.dist = "loadfile"  # module fixtures once per file (see above)
    workers = int(config.getoption("numprocesses"))
    config.stash[_RUN] = _Run(workers, Path(tempfile.mkdtemp(prefix="testharness_xdist_")))
    if config.getoption("dist") == "loadfile":
        config.stash[_RUN].durations = _recorded_durations(config)
        config.option.loadscopereorder = False  # keep the workers' order (below)
    config.pluginmanager.register(_Controller(config.stash[_RUN]), f"testharness-parallel-{id(config)}")


def _plan_workers(config: pytest.Config) -> bool:
    """Plan first: no more workers than the files to run (testharness.xdist_plan: loadfile,
    the harness's default, hands out whole files). False: none to run, so no worker and no Ray
    cluster (the caller removes xdist's session; the session runs in-process)."""
    if _gave_dist(config) and config.getoption("dist") != "loadfile":
        return True  # a --dist the user chose hands out tests, not files: xdist's count stands
    testmon = config.pluginmanager.get_plugin("TestmonSelect")
    selecting = testmon is not None and getattr(getattr(config, "testmon_config", None), "select", False)
    if selecting:
        remote_select_started(config)  # it keeps the files its reach selects out of testmon's skips
    files = files_to_run(
        config.args, config.invocation_params.dir, config.rootpath, config.getini("python_files"),
        config.getini("norecursedirs"), getattr(testmon, "deselected_files", ()) if selecting else (),
    )  # fmt: skip
    if files is None:
        return True
    files = {f for f in files if not file_left_out(config, config.rootpath / f)}  # e.g. mcore files by default
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


def _recorded_durations(config: pytest.Config) -> dict[str, float]:
    """Per test, its recorded duration in the results history ({} without history).

    Read once, here, and sent to every worker: xdist aborts a run whose workers collected
    different orders.
    """
    from testharness.history import load_history, planning_durations
    from testharness.settings import SettingsError

    try:
        directory = history_dir_of(config)
    except SettingsError:
        return {}  # the settings' own check reports it
    return planning_durations(load_history(directory, last=20).runs)


def _default_start(workers: int) -> str:
    import ray

    ray.init(address="local", include_dashboard=False)
    return str(ray.get_runtime_context().gcs_address)


class _NotMainThread(logging.Filter):
    """Drops Ray's warning that a driver started outside the main thread sets no SIGTERM
    handler: the harness keeps its own (reassert_signal_handlers)."""

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
        reassert_signal_handlers()  # ray.init replaced SIGTERM's handler (in the main thread)
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


# --- the workers ---------------------------------------------------------------------------


WORKER_PLUGIN = "testharness-parallel-worker"


# tryfirst: the outermost wrapper, so every other plugin's end of the session has run.
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
    settings = getattr(sys.modules.get("ray._raylet"), "Config", None)  # private; None: Ray not imported
    if "RAY_AUTH_MODE" in changed and settings is not None:
        settings.initialize("")


def shared_ray_address(config: pytest.Config) -> str | None:
    """In an xdist worker of a `-n` run whose workers share a Ray cluster: its address, once
    the controller has it (this waits; RAY_ADDRESS is exported). None elsewhere, or when the
    start failed (the controller ends the run). The harness calls it before the worker's first
    test; a conftest that joins earlier (in pytest_sessionstart) calls it first."""
    worker = config.pluginmanager.get_plugin(WORKER_PLUGIN)
    return worker.await_cluster() if isinstance(worker, _Worker) else None


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
            order = longest_files_first([item.nodeid for item in items], self.durations)
            position = {nodeid: i for i, nodeid in enumerate(order)}
            items.sort(key=lambda item: position[item.nodeid])

    @pytest.hookimpl(tryfirst=True)  # written before xdist tells the controller it collected
    def pytest_collection_finish(self, session: pytest.Session) -> None:
        self.run_first = [i.nodeid for i in session.items if i.get_closest_marker("run_first")]
        if self.durations:  # the controller schedules the files itself (LongestFirstScheduling)
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
        release = self.shared_dir / f"gpu_lease_{uuid.uuid4().hex}.release"
        try:
            return release if hold_node_gpus(self.lease_timeout_s, release) else None
        except TimeoutError as exc:
            item.add_marker(pytest.mark.skip(reason=f"uses_cuda: {exc}"))  # reported, never silent
            return None
