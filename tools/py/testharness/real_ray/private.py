"""Ray's private API (testharness.real_ray): the GCS's tables, the core worker, the raylet's
prestart, and the private methods remote selection wraps. Each call says what its caller falls
back to where this Ray differs."""

from __future__ import annotations

from types import ModuleType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from testharness.hygiene.core import Actor, Group

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
    try:
        from ray._private.grpc_utils import init_grpc_channel
    except ImportError:  # Ray 2.46: in ray._private.utils
        from ray._private.utils import init_grpc_channel  # type: ignore[no-redef,attr-defined]
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
