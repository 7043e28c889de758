"""Shared fixtures of the unit tests: offline assets and one Ray cluster per session.

The second half gives upstream NeMo RL's fixture names (its tests/unit/conftest.py) their
meaning here, so a test written upstream reads the same: `tiny_*_model_path`,
`init_ray_cluster`, `ray_gpu_monitor`, `session_data`, `_unit_test_data`,
`distributed_test_runner`, `TEST_ASSETS_DIR` (docs/from-upstream.md lists the differences).
Nothing here imports the library at module level: every test's import closure holds this file.
"""

from __future__ import annotations

import ast
import functools
import importlib.util
import inspect
import os
import sys
import threading
from collections.abc import Callable, Iterator, Mapping
from datetime import timedelta
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

UNIT_DIR = Path(__file__).resolve().parent

# Ray renices its workers to 15: beside any busy process (another job on a CI machine) an
# actor then gets ~3% of a core and a test that takes 6 s takes minutes. Every Ray cluster the
# tests start, here or in a subprocess, runs its workers at normal priority (nemo_rl's
# start_local_ray does the same for the clusters it starts).
os.environ.setdefault("RAY_worker_niceness", "0")
# Under `uv run`, Ray would start every worker from a uv-built copy of the project (the
# working directory packed, a venv made per job): the tests want this interpreter and
# environment, as-is (and coverage follows workers only then). Ray reads it when imported.
os.environ.setdefault("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")
# Ray prestarts one idle worker per logical CPU when a driver connects (16 interpreters
# importing Ray on a 16-core GPU machine, for each cluster a test or an example starts); the
# tests start actors, each in a worker process of its own, so the prestarted ones are waste.
os.environ.setdefault("RAY_prestart_worker_first_driver", "0")
# No usage statistics from a test session's Ray clusters, as in upstream NeMo RL's (there importing
# its library sets it; this library sets nothing on import): upstream's test_meta.py checks it.
os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
ASSETS = UNIT_DIR / "test_assets"
TEST_ASSETS_DIR = str(ASSETS)  # upstream's name for it: a str, as its os.path.join gives


def session_cpus(workers: int) -> int:
    """Logical CPUs for the Ray cluster that `workers` xdist workers share. A worker group
    reserves 0.5-1 CPU per policy worker and a test module may hold one group in a fixture
    while its test builds another: with only one CPU per core, two workers' fixtures can each
    wait for the CPUs the other holds. Reservations here are bookkeeping, not load."""
    return max(os.cpu_count() or 1, 4 * workers)


def join_or_start_ray(**init_kwargs: Any) -> Any:
    """The library's `init_ray`, joining RAY_ADDRESS or else this machine's `ray start --head`
    (docs/unit-tests.md: a session reuses a running cluster), else starting one (retried on a
    busy machine). Joining a head it did not name is the suite's habit, not the library's."""
    from nemo_rl.distributed.ray_cluster import init_ray
    from testharness.real_ray import local_head_address

    return init_ray(address=os.environ.get("RAY_ADDRESS") or local_head_address(), **init_kwargs)


def pytest_testharness_start_ray(config: pytest.Config, workers: int) -> str:
    """The Ray cluster of a `-n` run, started by the xdist controller."""
    info = join_or_start_ray(num_cpus=session_cpus(workers))
    return info.address


MAX_WARM_WORKERS = 3  # the most actors one test file of the suite starts at once (test_dtensor_fsdp)


def warm_workers_wanted(workers: int) -> int:
    """Warm Ray workers (testharness.warm_workers) each of `workers` xdist workers'
    jobs asks for: NRL_WARM_WORKERS, or by default as many as the cores left beyond one per
    xdist worker allow, up to MAX_WARM_WORKERS. A warm worker imports for seconds on a core of
    its own: it pays where cores would idle while the workers collect
    (an H200 machine's 16 cores and the actor edit's 4-5 workers: 42.7 s -> 36.9 s,
    docs/benchmarks.md), not where the workers take them all (the 2-core CPU box with 2
    workers: 36 s -> 47 s; so none there)."""
    raw = os.environ.get("NRL_WARM_WORKERS", "").strip()
    if not raw:
        return max(0, min(MAX_WARM_WORKERS, (os.cpu_count() or 1) // max(workers, 1) - 1))
    if not raw.isdigit():
        raise pytest.UsageError(f"NRL_WARM_WORKERS={raw!r}: expected a whole number of workers")
    return int(raw)


_joined_early = False  # this xdist worker joined the run's cluster before its first test
_joining: threading.Thread | None = None


def measure_child_processes(config: pytest.Config) -> None:
    """Under `--cov`, every Python process a test starts (an example run as a user runs it, and
    its Ray workers) is measured too; the library hands coverage only to its own Ray jobs."""
    if getattr(config.option, "cov_source", None):
        from nemo_rl.utils.child_coverage import child_coverage_env

        os.environ.update(child_coverage_env())


@pytest.hookimpl(trylast=True)  # pytest-cov measures an xdist worker from its own sessionstart on
def pytest_sessionstart(session: pytest.Session) -> None:
    """Coverage handed to the processes the tests start (`measure_child_processes`).

    With warm workers, an xdist worker of a `-n` run joins the run's cluster and asks for
    them in a thread while it collects: they import torch and transformers beside its
    collection, and its first actor starts in a process that is ready (asked for just before
    the actor, a warm worker is only a second process importing the same). The collection does
    not wait for the cluster, which the controller starts while the workers start. Otherwise the
    harness joins it before the first test."""
    global _joining
    measure_child_processes(session.config)
    workerinput = getattr(session.config, "workerinput", None)
    if workerinput is None or not (count := warm_workers_wanted(int(workerinput.get("workercount", 1)))):
        return
    # Ray imported here, before the thread: the collection imports it too, and two threads that
    # import one package's circular modules at once can fail with importlib's _DeadlockError.
    import nemo_rl.distributed.ray_cluster  # noqa: F401

    _joining = threading.Thread(target=_join_early, args=(session.config, count), name="nrl-warm-workers")
    _joining.start()


def _join_early(config: pytest.Config, count: int) -> None:
    global _joined_early
    from testharness.parallel import shared_ray_address

    if not shared_ray_address(config):  # waits for the controller's start; None: not a shared cluster
        return
    import logging

    from nemo_rl.distributed.ray_cluster import init_ray, job_runtime_env
    from testharness import warm_workers

    # WARNING: not "Connecting to existing Ray cluster" once per worker, outside any test; nor
    # Ray's note that a driver connected outside the main thread sets no SIGTERM handler (the
    # harness keeps its own).
    logging.getLogger("ray._private.worker").addFilter(lambda record: "main thread" not in record.getMessage())
    try:
        init_ray(runtime_env=warm_workers.with_preload_hook(job_runtime_env()), logging_level=logging.WARNING)
    except Exception as exc:  # noqa: BLE001  the ray_cluster fixture tries again and fails the tests that need it
        print(f"warm Ray workers: could not join the run's cluster: {exc}", file=sys.stderr)
        return
    _joined_early = True
    warm_workers.prestart(count)


@pytest.hookimpl(tryfirst=True)
def pytest_runtestloop(session: pytest.Session) -> None:
    """The early join is over before the first test: no test connects to Ray beside it."""
    if _joining is not None:
        _joining.join()


@pytest.fixture(scope="session")
def test_assets() -> Path:
    """The offline assets, built on first use if missing (a few seconds)."""
    spec = importlib.util.spec_from_file_location("prepare_unit_test_assets", UNIT_DIR / "prepare_unit_test_assets.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return Path(module.prepare(ASSETS, log=lambda _msg: None))


@pytest.fixture
def in_repo(test_assets: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The shipped configs' relative paths point into tests/unit/test_assets: run from the repo root."""
    monkeypatch.chdir(UNIT_DIR.parents[1])
    return test_assets


@pytest.fixture(scope="session")
def tiny_llama(test_assets: Path) -> str:
    return str(test_assets / "tiny_llama")


@pytest.fixture(scope="session")
def tiny_qwen2(test_assets: Path) -> str:
    return str(test_assets / "tiny_qwen2")


@pytest.fixture(scope="session")
def ray_cluster() -> Iterator[object]:
    """Start Ray once for the session (or join RAY_ADDRESS / a local `ray start` head) and stop what we started."""
    import ray

    from nemo_rl.distributed.ray_cluster import RayStartError

    already = ray.is_initialized() and not _joined_early
    try:
        info = join_or_start_ray()  # a busy machine: retried for up to NRL_RAY_START_TIMEOUT_S
    except RayStartError as exc:
        pytest.fail(str(exc), pytrace=False)  # one line, repeated by every test that needs Ray
    yield info
    if not already:
        from testharness.real_ray import stop_cluster

        stop_cluster(ray)  # ray.shutdown(), without its second of waiting on the autoscaler's monitor


# ---------------------------------------------------------------- upstream NeMo RL's names
# Its tiny models are built offline here (prepare_unit_test_assets.py), with random weights and
# the local tokenizer instead of a gated model's: tiny_llama_model_path is `tiny_llama`.


@pytest.fixture(scope="session")
def tiny_llama_model_path(tiny_llama: str) -> str:
    """A tiny Llama (2 layers, untied embeddings) with its tokenizer."""
    return tiny_llama


@pytest.fixture(scope="session")
def tiny_llama_tied_model_path(test_assets: Path) -> str:
    """The tiny Llama with tied input and output embeddings."""
    return str(test_assets / "tiny_llama_tied")


@pytest.fixture(scope="session")
def tiny_qwen2_model_path(tiny_qwen2: str) -> str:
    """A tiny Qwen2 with its tokenizer."""
    return tiny_qwen2


@pytest.fixture(scope="session")
def tiny_qwen3_model_path(test_assets: Path) -> str:
    """A tiny Qwen3 (q/k norms) with its tokenizer."""
    return str(test_assets / "tiny_qwen3")


@pytest.fixture(scope="session")
def tiny_gemma3_model_path(test_assets: Path) -> str:
    """A tiny Gemma 3 text model (tied embeddings) with its tokenizer."""
    return str(test_assets / "tiny_gemma3")


@pytest.fixture(scope="session")
def tiny_nemotron5_h_model_path(test_assets: Path) -> str:
    """A tiny Nemotron-H: one Mamba-2, one attention and one MLP layer, with its tokenizer
    (transformers' own NemotronH classes: no remote code)."""
    return str(test_assets / "tiny_nemotron5_h")


@pytest.fixture(scope="session")
def init_ray_cluster(ray_cluster: object) -> object:
    """Upstream's name for `ray_cluster` (the ClusterInfo). A test whose file imports Ray, or
    that uses a fixture of a conftest.py that does, gets it without naming it (`needs_ray`)."""
    return ray_cluster


@pytest.fixture(scope="session")
def ray_gpu_monitor(init_ray_cluster: object) -> Any:
    """GPU memory and utilisation of every GPU of the Ray cluster, read when asked:
    `ray_gpu_monitor.collect(force=True)` -> {"gpu/node<i>_gpu<j>/memory_used_mib": MiB, ...}
    ({} without GPUs). The library's GpuMonitor; upstream's polls in a thread every second."""
    from nemo_rl.utils.gpu_monitor import GpuMonitor

    return GpuMonitor(interval_s=0)


# Upstream's init_ray_cluster and ray_gpu_monitor are autouse: every run pays a Ray start (a
# one-test run: 1.8 s -> 8.1 s on the 2-core box). Here a test gets them unasked when its file
# imports Ray, directly or through nemo_rl, or when a fixture it uses (at any depth) is defined
# in a conftest.py or test file of the suite that does (upstream's data_plane/conftest.py: its
# session fixtures build clients on the session's cluster); tests that never touch Ray start none.
RAY_FIXTURES = ("init_ray_cluster", "ray_gpu_monitor")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Ray first for the tests that need it (`needs_ray`): its fixtures lead the test's fixtures,
    so they are set up before any other (a session fixture of a sub-folder's conftest that uses
    Ray included). By name: a file's own `init_ray_cluster` (upstream's no-op override) wins."""
    decided: dict[Path, bool] = {}
    for item in items:
        names = getattr(item, "fixturenames", None)
        if isinstance(names, list) and needs_ray(item, decided):
            names[:] = [*RAY_FIXTURES, *(n for n in names if n not in RAY_FIXTURES)]


def needs_ray(item: pytest.Item, decided: dict[Path, bool] | None = None) -> bool:
    """Whether `item`'s file imports Ray (`module_imports_ray`), or a file of the suite (a
    conftest.py, a test file) that defines one of the fixtures it uses does. `decided`: file ->
    answer, for a session's items."""
    decided = {} if decided is None else decided
    module = getattr(item, "module", None)
    found = [vars(module)] if module is not None else []
    definitions = getattr(getattr(item, "_fixtureinfo", None), "name2fixturedefs", {})  # pytest's, no public API
    found += [getattr(inspect.unwrap(d.func), "__globals__", {}) for defs in definitions.values() for d in defs]
    for namespace in found:  # a function's globals: its module's (a conftest's name need not be unique)
        name, file = namespace.get("__name__"), namespace.get("__file__")
        if not isinstance(name, str) or not isinstance(file, str) or not file.endswith(".py"):
            continue
        path = Path(file).resolve()
        if not path.is_relative_to(UNIT_DIR):
            continue  # a plugin's fixture (the harness's, pytest's): not the suite's
        if path not in decided:
            decided[path] = imports_ray(name, path)
        if decided[path]:
            return True
    return False


LIBRARY = "nemo_rl"  # followed wherever it is installed; other installed packages are not


def module_imports_ray(module: ModuleType) -> bool:
    """Whether importing `module` (a test file, already imported) imported Ray: a module-level
    import of `ray`, in the file or in a module it imports so that is nemo_rl's or a file of
    this checkout (a test helper), and so on."""
    return imports_ray(module.__name__, _source_of(module.__name__, module))


def _source_of(name: str, module: ModuleType | None = None) -> Path | None:
    """The source file of the imported module `name` when it is followed (nemo_rl, or a file of
    this checkout outside any virtual environment), else None: another package, or a name
    imported from a module rather than a module (`from a import B`: `a.B`)."""
    module = module or sys.modules.get(name)
    file = getattr(module, "__file__", None)
    if not file or not file.endswith(".py"):
        return None
    path = Path(file).resolve()
    if name.partition(".")[0] == LIBRARY:
        return path
    inside = path.is_relative_to(UNIT_DIR.parents[1])
    return path if inside and not {".venv", "site-packages"} & set(path.parts) else None


def imports_ray(name: str, path: Path | None, source_of: Callable[[str], Path | None] = _source_of) -> bool:
    """Whether importing module `name` (source `path`) imports Ray, through the modules
    `source_of` finds a source for (and their parent packages, which an import runs first)."""
    seen: set[str] = set()
    todo: list[tuple[str, Path | None]] = [(name, path)]
    while todo:
        current, source = todo.pop()
        if current == "ray" or current.startswith("ray."):
            return True
        if current in seen or source is None:
            continue
        seen.add(current)
        package = current if source.name == "__init__.py" else current.rpartition(".")[0]
        parents = [current.rsplit(".", i)[0] for i in range(1, current.count(".") + 1)]
        todo += [(n, source_of(n)) for n in (*module_level_imports(source, package), *parents)]
    return False


@functools.cache
def module_level_imports(path: Path, package: str) -> tuple[str, ...]:
    """The modules a file imports when it is imported: its import statements outside functions
    and classes (inside top-level if/try/with too, not under `if TYPE_CHECKING`); `from a import
    b` names both `a` and `a.b`; relative imports are resolved against `package`."""
    found: list[str] = []
    nodes = list(ast.parse(path.read_bytes(), str(path)).body)
    while nodes:
        node = nodes.pop()
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.rsplit(".", node.level - 1)[0]
                base = f"{parent}.{base}" if base else parent
            found += [base, *(f"{base}.{alias.name}" for alias in node.names if alias.name != "*")]
        elif isinstance(node, ast.If):
            checking = ast.unparse(node.test) in ("TYPE_CHECKING", "typing.TYPE_CHECKING")
            nodes += node.orelse if checking else [*node.body, *node.orelse]
        elif isinstance(node, ast.Try | ast.TryStar):
            nodes += [*node.body, *(s for h in node.handlers for s in h.body), *node.orelse, *node.finalbody]
        elif isinstance(node, ast.With):
            nodes += node.body
    return tuple(found)


@pytest.fixture(scope="session", autouse=True)
def _unit_test_data(request: pytest.FixtureRequest) -> Mapping[str, Any]:
    """Upstream's record of the session under its own name (upstream files that replace
    `session_data` by it, `def session_data(_unit_test_data): yield _unit_test_data`): the same
    live, read-only record as `session_data`. Autouse as upstream's; it starts nothing."""
    from testharness.tracker import session_record

    return session_record(request.config)


@pytest.fixture(scope="session", autouse=True)
def session_data(_unit_test_data: Mapping[str, Any]) -> Mapping[str, Any]:
    """The record this session writes to unit_results.json, read live: upstream's keys
    (`metrics`, `git_commit`, `start_time`, `gpu_types`, `coverage`, `exit_status`) and the
    harness's (`tests`, `memory_unit`, `memory_source`). Read-only: metrics go in through
    `tracker`, which checks them and carries them from an xdist worker. Autouse as upstream's,
    without upstream's Ray start (it needs none here)."""
    return _unit_test_data


DIST_TIMEOUT = timedelta(minutes=5)  # a rank left waiting in a collective fails, not hangs


class RankFailed(RuntimeError):
    """A rank of distributed_test_runner raised: the first to fail, with its traceback."""


def _distributed_test_wrapper(
    rank: int, test_fn: Callable[[int, int], None], world_size: int, init_method: str, backend: str, errors: Path
) -> None:
    """One rank of distributed_test_runner, in a spawned process: join the group, run, leave.
    A failure is also written to `errors` with its time: the rank that failed first is the
    cause, the others (a peer gone in a collective) its consequences."""
    import time
    import traceback

    import torch
    import torch.distributed as dist

    def record() -> None:  # before leaving the group: the peers fail once this rank has left
        if not (errors / f"rank{rank}").exists():
            (errors / f"rank{rank}").write_text(f"{time.time()}\n{traceback.format_exc()}")

    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world_size))
    try:
        if backend == "nccl":
            torch.cuda.set_device(rank)
        dist.init_process_group(
            backend, init_method=init_method, rank=rank, world_size=world_size, timeout=DIST_TIMEOUT
        )
        try:
            test_fn(rank, world_size)
        except BaseException:
            record()
            raise
        finally:
            dist.destroy_process_group()
    except BaseException:
        record()
        raise


def _rank_failures(errors: Path) -> str | None:
    """The ranks' failures, first one first, or None when no rank wrote one."""
    found = []
    for file in errors.glob("rank*"):
        when, _, text = file.read_text().partition("\n")
        found.append((float(when), int(file.name[4:]), text.rstrip()))
    if not found:
        return None
    found.sort()
    (_, rank, text), rest = found[0], found[1:]
    later = "".join(f"\nthen rank {r}: {t.splitlines()[-1]}" for _, r, t in rest)
    return f"rank {rank} failed first:\n{text}{later}"


@pytest.fixture
def distributed_test_runner(tmp_path_factory: pytest.TempPathFactory) -> Callable[..., None]:
    """`run(test_fn, world_size, backend=None)`: run `test_fn(rank, world_size)` in
    `world_size` spawned processes that form one torch.distributed group; a rank that raises
    fails the test (RankFailed, with the traceback of the rank that failed first). The backend
    is NCCL (one GPU per rank) when this machine has `world_size` GPUs, else gloo on the CPU:
    write `test_fn` for both, e.g. `device = "cuda" if dist.get_backend() == "nccl" else "cpu"`.
    `backend="nccl"` without enough GPUs skips, naming the need. `test_fn` must be importable
    (module level, or a functools.partial of such a function). Mark such a test `uses_cuda`:
    under -n it then holds this node's GPUs while it runs."""

    def run(test_fn: Callable[[int, int], None], world_size: int, backend: str | None = None) -> None:
        import multiprocessing.resource_tracker as resource_tracker

        import torch
        import torch.multiprocessing as mp

        gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if backend is None:
            backend = "nccl" if gpus >= world_size else "gloo"
        if backend == "nccl" and gpus < world_size:
            pytest.skip(f"backend nccl needs {world_size} GPUs, {gpus} visible")
        work = tmp_path_factory.mktemp("dist")
        (work / "errors").mkdir()
        # A file store, not a TCP port: nothing to collide with on a shared machine.
        init_method = (work / "store").as_uri()
        tracker_was_running = resource_tracker._resource_tracker._pid is not None  # type: ignore[attr-defined]
        try:
            mp.spawn(
                _distributed_test_wrapper,
                args=(test_fn, world_size, init_method, backend, work / "errors"),
                nprocs=world_size,
            )
        except Exception as exc:
            failures = _rank_failures(work / "errors")
            if failures is None:
                raise  # a rank died without a Python error (a signal, os._exit): spawn says which
            raise RankFailed(failures) from exc
        finally:
            if not tracker_was_running:  # spawn's helper process would outlive the test
                resource_tracker._resource_tracker._stop()  # type: ignore[attr-defined]

    return run
