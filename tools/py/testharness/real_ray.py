"""The harness's one door into Ray: is `ray` the real Ray, and every call the harness makes
into it that is more than `ray.get`/`ray.remote` (connections, the cluster's GPUs, tasks
pinned to a node, and Ray's private API).

Where the harness is merely installed, the project's `ray` may be anything: not installed,
blocked (`sys.modules["ray"] = None`), or a stand-in its tests put in `sys.modules["ray"]`
(a module of their own, a `MagicMock`, a local `ray.py`). The harness calls into `ray` only
when it is Ray's own package, and never imports Ray (seconds) just to find it unused: only a
feature that needs Ray (the `-n` cluster) calls `load`.

Ray's package is recognised by what `import ray` itself leaves behind: a module named `ray`
loaded from a package's `__init__.py`, whose compiled core `ray._raylet` was imported from the
same folder, with the functions the harness calls. A stand-in has none of that; a Ray still in
the middle of its own import (an audit hook firing inside it) is not yet usable and counts as
absent too.

Ray's private API (`ray._private`, the GCS's protobuf messages in `ray.core.generated`) is
used here and nowhere else in the harness. It changes between Ray releases (the range tested
is declared in tools/py/pyproject.toml): each such call says what it falls back to where this
Ray differs, and none of them can fail a test or lose its record.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import socket
import sys
from collections.abc import Iterator
from importlib.machinery import ModuleSpec
from types import ModuleType
from typing import TYPE_CHECKING, Any, TypeGuard

if TYPE_CHECKING:
    from testharness.hygiene.core import Actor, Group

_USED = ("is_initialized", "init", "get", "remote", "nodes", "shutdown", "get_runtime_context")


def is_ray(module: object) -> TypeGuard[ModuleType]:
    """Whether `module` is Ray's own package (never imports anything)."""
    if not isinstance(module, ModuleType):  # None, a MagicMock (even one with spec=ModuleType: below)
        return False
    try:
        spec = getattr(module, "__spec__", None)
        if not isinstance(spec, ModuleSpec) or spec.name != "ray" or not spec.origin:
            return False
        if os.path.basename(spec.origin) != "__init__.py":
            return False  # a single-file ray.py
        core = sys.modules.get("ray._raylet")
        core_file = getattr(core, "__file__", None) if isinstance(core, ModuleType) else None
        if not core_file or os.path.dirname(core_file) != os.path.dirname(spec.origin):
            return False
        return all(callable(getattr(module, name, None)) for name in _USED)
    except Exception:  # noqa: BLE001  an object whose attributes raise is no Ray either
        return False


def imported() -> ModuleType | None:
    """Ray's package when this process has imported it, else None (never imports it)."""
    module = sys.modules.get("ray")
    return module if is_ray(module) else None


def connected() -> ModuleType | None:
    """Ray's package when this process is connected to a cluster, else None (never imports it)."""
    ray = imported()
    if ray is None:
        return None
    try:
        return ray if ray.is_initialized() else None
    except Exception:  # noqa: BLE001  a Ray half torn down (any error): not connected
        return None


def load() -> tuple[ModuleType | None, str]:
    """(Ray's package, "") importing it if need be, else (None, why not: one line)."""
    if "ray" in sys.modules:
        module = sys.modules["ray"]
        if is_ray(module):
            return module, ""
        if module is None:
            return None, "Ray is blocked in this process (sys.modules['ray'] is None)"
        return None, f"sys.modules['ray'] is not Ray but a stand-in ({type(module).__name__})"
    try:
        module = importlib.import_module("ray")
    except Exception as exc:  # noqa: BLE001  not installed, or an install that fails to import
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        return None, f"Ray cannot be imported: {first}"
    if not is_ray(module):
        where = getattr(module, "__file__", None) or type(module).__name__
        return None, f"the `ray` this process imports is not Ray ({where})"
    return module, ""


# --- connections -------------------------------------------------------------------------


def reachable(address: str, timeout_s: float = 1.0) -> bool:
    """Whether something answers at `host:port` (a head's GCS port), within `timeout_s`."""
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        return False
    try:
        with socket.create_connection((host, int(port)), timeout=timeout_s):
            return True
    except OSError:
        return False


def local_head_address() -> str | None:
    """The address a `ray start --head` on this machine recorded, if that head answers.

    Only `ray start` writes this record, so a Ray instance that another pytest session started
    in-process (and will stop) is never joined; a killed head's stale record is not trusted.
    Imports Ray (run_unit's discovery, before any test); None without Ray or where it differs."""
    try:
        from ray._private.services import find_bootstrap_address

        address = find_bootstrap_address(None)
    except Exception:  # noqa: BLE001  not installed, or Ray's private API differs between releases: no head found
        return None
    return address if address and reachable(address) else None


@contextlib.contextmanager
def joined(ray: ModuleType, address: str | None = None, **init_kwargs: Any) -> Iterator[ModuleType]:
    """Connected to a cluster for the block: the one this process is connected to, else the
    one at `address` (default $RAY_ADDRESS, else "auto": this machine's head), joined for the
    block and left after it. Errors of `ray.init` are the caller's."""
    if ray.is_initialized():
        yield ray
        return
    ray.init(address=address or os.environ.get("RAY_ADDRESS") or "auto", log_to_driver=False, **init_kwargs)
    try:
        yield ray
    finally:
        ray.shutdown()


# --- the cluster ---------------------------------------------------------------------------


def stop_cluster(ray: ModuleType) -> None:
    """`ray.shutdown()` of a cluster this process started, less the second it spends on the
    autoscaler's monitor: Ray stops its processes one by one, each given a second to exit on
    SIGTERM, and the monitor (idle on a one-node local cluster) takes all of it, its handler
    reporting to a GCS already stopped. The monitor is ended first (SIGKILL: it holds no
    state); the rest stop as Ray stops them. Where this Ray differs, a plain `ray.shutdown()`."""
    try:
        node = ray._private.worker._global_node
        monitors = list(node.all_processes.get("monitor", [])) if node is not None else []
    except Exception:  # noqa: BLE001  Ray's private API differs between releases
        monitors = []
    for info in monitors:
        try:
            info.process.kill()
            info.process.wait(timeout=5)
        except Exception:  # noqa: BLE001  gone already, or not ours to wait on: Ray's shutdown handles it
            pass
    ray.shutdown()


def reread_settings() -> None:
    """Have an imported Ray read its RAY_* settings again (Ray's own `Config.initialize("")`,
    what it does after setting RAY_AUTH_MODE in the process that starts a cluster): a process
    that imported Ray before the variables were set. Nothing where Ray is not imported or
    differs."""
    settings = getattr(sys.modules.get("ray._raylet"), "Config", None)  # private
    if settings is not None:
        settings.initialize("")


def cluster_gpus(ray: ModuleType) -> int:
    """GPUs of the cluster this process is connected to (the total of its resources)."""
    return int(ray.cluster_resources().get("GPU", 0))


def gpus_of_cluster_at(address: str) -> int:
    """Join the cluster at `address`, count its GPUs, leave it. Raises what joining raised
    (RuntimeError, one line, when there is no real Ray to join with)."""
    import logging

    ray, why_not = load()
    if ray is None:
        raise RuntimeError(why_not)
    with joined(ray, address, logging_level=logging.ERROR):
        return cluster_gpus(ray)


def job_hex(ray: ModuleType) -> str:
    """The id (hex) of this driver's Ray job: each xdist worker is a driver, so a job, of its own."""
    return str(ray.get_runtime_context().get_job_id())


def this_node_id(ray: ModuleType) -> str:
    """The id (hex) of the node this process runs on."""
    return str(ray.get_runtime_context().get_node_id())


def alive_node_ids(ray: ModuleType) -> list[str]:
    """The ids (hex) of the cluster's alive nodes."""
    return [str(node["NodeID"]) for node in ray.nodes() if node.get("Alive")]


def other_node_ids(ray: ModuleType) -> list[str]:
    """The alive nodes other than this process's: the ones a reading must ask through a task
    (this process reads its own machine itself)."""
    here = this_node_id(ray)
    return [node for node in alive_node_ids(ray) if node != here]


def node_gpus(ray: ModuleType, node_id: str) -> float:
    """The GPUs node `node_id` has (0 when it has none or is not in the cluster)."""
    return float(next((n["Resources"].get("GPU", 0) for n in ray.nodes() if n["NodeID"] == node_id), 0))


def on_node(ray: ModuleType, target: Any, node_id: str, **options: Any) -> Any:
    """`target` (a function or a class) as a zero-CPU Ray task or actor pinned to node
    `node_id` (hard affinity: it runs there or fails), with Ray's `options` (num_gpus,
    lifetime, ...): call `.remote(...)` on what comes back. A zero-CPU task never waits for
    the CPUs the tests' own actors hold. Build `target` inside a function, so cloudpickle
    ships it by value and the Ray workers need not import the harness."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    pinned = NodeAffinitySchedulingStrategy(node_id, soft=False)
    return ray.remote(num_cpus=0)(target).options(scheduling_strategy=pinned, **options)


# --- Ray's private API: what the GCS and the core worker know ---------------------------------


def _gcs() -> Any:
    # The GCS client this driver already holds (what `ray.util.state` falls back on without the
    # dashboard; the state API itself needs `ray[default]`, a dashboard and an HTTP round trip).
    from ray._private import state as ray_state

    state: Any = ray_state.state  # its shape differs between releases (below)
    connect = getattr(state, "_connect_and_get_accessor", None)
    if connect is not None:
        return connect()
    state._check_connected()  # Ray 2.46 (the range's low end): made on first use, then an attribute
    return state.global_state_accessor


def job_actors(ray: ModuleType, job_hex: str) -> dict[str, Actor]:
    """Every actor of job `job_hex` that is not dead (pending, alive or restarting), from the
    GCS. Raises where the cluster is going away or this Ray differs: the caller falls back."""
    from ray.core.generated import gcs_pb2

    from testharness.hygiene.core import Actor

    table = gcs_pb2.ActorTableData  # type: ignore[attr-defined,unused-ignore]
    actors = {}
    for blob in _gcs().get_actor_table(ray.JobID.from_hex(job_hex), None):
        data = table.FromString(blob)
        if data.state == table.DEAD:
            continue
        actor_id = data.actor_id.hex()
        actors[actor_id] = Actor(
            id=actor_id,
            class_name=data.class_name,
            pid=int(data.pid),
            node_id=_node_of(data.address),
            name=data.name,
            namespace=data.ray_namespace if data.name else "",
            detached=bool(data.is_detached),
            state=table.ActorState.Name(data.state),
        )
    return actors


def _node_of(address: Any) -> str:
    # A worker's address names its node `node_id`; `raylet_id` in Ray 2.46 (the range's low end).
    field = "node_id" if "node_id" in address.DESCRIPTOR.fields_by_name else "raylet_id"
    return str(getattr(address, field).hex())


def job_placement_groups(job_hex: str) -> dict[str, Group]:
    """Placement groups job `job_hex` created that are not removed, from the GCS. Raises where
    the cluster is going away or this Ray differs: the caller falls back."""
    from ray.core.generated import common_pb2, gcs_pb2

    from testharness.hygiene.core import Group

    table = gcs_pb2.PlacementGroupTableData  # type: ignore[attr-defined,unused-ignore]
    groups = {}
    for blob in _gcs().get_placement_group_table():
        data = table.FromString(blob)
        if data.state == table.REMOVED or data.creator_job_id.hex() != job_hex:
            continue
        group_id = data.placement_group_id.hex()
        groups[group_id] = Group(
            id=group_id,
            name=data.name,
            strategy=common_pb2.PlacementStrategy.Name(data.strategy),  # type: ignore[attr-defined,unused-ignore]
            bundles=len(data.bundles),
            state=table.PlacementGroupState.Name(data.state),
        )
    return groups


def raylet_socket_name(ray: ModuleType) -> str | None:
    """The socket of the raylet this driver talks to (it names that raylet's process); None
    where this Ray differs."""
    try:
        return str(ray._private.worker.global_worker.node.raylet_socket_name)
    except Exception:  # noqa: BLE001  Ray's private API differs between releases
        return None


def kill_actor(ray: ModuleType, actor_hex: str) -> None:
    """Kill an actor by its id, no restart (what `ray.kill` does with a handle). Raises when
    it cannot (already dead, or this Ray differs): the caller then ends the process by pid."""
    core = ray._private.worker.global_worker.core_worker
    core.kill_actor(ray.ActorID.from_hex(actor_hex), True)


def owned_refs(ray: ModuleType) -> list[Any] | None:
    """An ObjectRef for every object this process owns a reference to (the results of its
    unfinished tasks among them); None where this Ray differs."""
    try:
        ids = list(ray._private.worker.global_worker.core_worker.get_all_reference_counts())
    except Exception:  # noqa: BLE001  Ray's private API differs between releases
        return None
    refs = []
    for object_id in ids:
        # keys are hex text (bytes in Ray 2.x); an ObjectRef takes the 28 raw bytes
        text = object_id.decode() if isinstance(object_id, bytes) else str(object_id)
        try:
            refs.append(ray.ObjectRef(bytes.fromhex(text)))
        except Exception:  # noqa: BLE001  a key of another form: not a task's result to cancel
            continue
    return refs


# --- Ray's private API: warm workers (testharness.warm_workers) --------------------------------


def session_dir(ray: ModuleType) -> str | None:
    """This process's Ray session folder (a driver's and its node's workers' alike); None where
    this process has no session or this Ray differs."""
    try:
        return str(ray._private.worker.global_worker.node.get_session_dir_path())
    except Exception:  # noqa: BLE001  not connected, or Ray's private API differs between releases
        return None


def prestart_workers(ray: ModuleType, count: int, keep_alive_s: int) -> None:
    """Ask this node's raylet to start `count` idle workers for this job and its runtime
    environment (its private gRPC `NodeManagerService.PrestartWorkers`); an unused one ends
    after `keep_alive_s`. Raises where this Ray has no such call or the raylet refused: the
    caller's actors then start in new processes, as they would anyway."""
    from ray._private.grpc_utils import init_grpc_channel
    from ray.core.generated import common_pb2, node_manager_pb2, node_manager_pb2_grpc

    # Private and generated modules: nothing to type-check against.
    worker: Any = ray._private.worker.global_worker
    messages: Any = node_manager_pb2
    common: Any = common_pb2
    job = ray.get_runtime_context().get_job_id()
    request = messages.PrestartWorkersRequest(
        language=common.PYTHON, job_id=bytes.fromhex(job), keep_alive_duration_secs=keep_alive_s, num_workers=count
    )
    job_config = worker.core_worker.get_job_config()
    request.runtime_env_info.ParseFromString(job_config.runtime_env_info.SerializeToString())
    node = worker.node
    channel = init_grpc_channel(f"{node.node_ip_address}:{node.node_manager_port}")
    node_manager_pb2_grpc.NodeManagerServiceStub(channel).PrestartWorkers(request, timeout=30)


def task_function_manager() -> type | None:
    """Ray's FunctionActorManager class, whose `get_execution_info` hands a worker the function
    of each task it runs (remote_select's worker tracer wraps it); None where this Ray has none.
    The class travels to the workers by reference (its module is Ray's, which they import)."""
    try:
        from ray._private import function_manager
    except ImportError:  # not installed, or Ray's private API differs between releases
        return None
    manager = getattr(function_manager, "FunctionActorManager", None)
    return manager if isinstance(manager, type) else None


# --- Ray's private API: where the remote selector sees work leave a process ------------------


def work_senders(ray: ModuleType) -> tuple[tuple[type, str], ...]:
    """Where Ray's public API hands work to other workers, as (class, method name) pairs to
    wrap, in this order: an actor created (`ActorClass._remote`), an actor's method called
    (`ActorHandle._actor_method_call`), a task submitted (`RemoteFunction._remote`). Remote
    selection wraps them in the driver (reach.py) and in each traced worker (worker_trace.py:
    plain tuples of Ray's classes, pickled by reference). Where this Ray differs, wrapping
    one fails with AttributeError."""
    import ray.actor
    import ray.remote_function

    return (
        (ray.actor.ActorClass, "_remote"),
        (ray.actor.ActorHandle, "_actor_method_call"),
        (ray.remote_function.RemoteFunction, "_remote"),
    )


def actor_id_of(handle: Any) -> str | None:
    """The id (hex) of the actor behind `handle`; None for what is not an actor handle."""
    actor_id = getattr(handle, "_ray_actor_id", None)
    return actor_id.hex() if actor_id is not None else None


def actor_module_of(handle: Any) -> str | None:
    """The module of the class behind `handle`'s actor, as its creation descriptor names it."""
    return getattr(getattr(handle, "_ray_actor_creation_function_descriptor", None), "module_name", None)


def actor_user_class(actor_class: Any) -> type | None:
    """The class `@ray.remote` made `actor_class` from (None where this Ray differs)."""
    cls = getattr(getattr(actor_class, "__ray_metadata__", None), "modified_class", None)
    return cls if isinstance(cls, type) else None


def runs_calls_in_order(actor_class: Any, options: dict[str, Any]) -> bool:
    """Whether an actor of `actor_class`, created with `options`, is a sync actor with one
    thread: its tasks run one by one, in the order the driver sent them, on its main thread.
    Threaded and async actors do not; False where this Ray differs."""
    import inspect

    cls = actor_user_class(actor_class)
    if cls is None or getattr(actor_class.__ray_metadata__, "concurrency_groups", None):
        return False
    if options.get("max_concurrency") not in (None, 1) or options.get("concurrency_groups"):
        return False
    return not any(
        inspect.iscoroutinefunction(m) or inspect.isasyncgenfunction(m)
        for _, m in inspect.getmembers(cls, predicate=inspect.isfunction)
    )


def task_function_of(remote_function: Any) -> Any:
    """The function a `RemoteFunction` (what `@ray.remote` makes of a function) runs; None
    where this Ray differs."""
    return getattr(remote_function, "_function", None)
