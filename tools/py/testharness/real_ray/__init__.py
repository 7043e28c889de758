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
used in this package and nowhere else in the harness. It changes between Ray releases (the
range tested is declared in tools/py/pyproject.toml): each such call says what it falls back
to where this Ray differs, and none of them can fail a test or lose its record.

One door, three rooms: `find.py` (is it Ray), `cluster.py` (connections, the cluster, a task
on a node), `private.py` (Ray's private API). Callers import this package only.
"""

from __future__ import annotations

from testharness.real_ray.cluster import (
    alive_node_ids,
    cluster_gpus,
    gpus_of_cluster_at,
    job_hex,
    joined,
    local_head_address,
    node_gpus,
    on_node,
    other_node_ids,
    reachable,
    reread_settings,
    stop_cluster,
    this_node_id,
)
from testharness.real_ray.find import (
    connected,
    imported,
    is_ray,
    load,
)
from testharness.real_ray.private import (
    actor_id_of,
    actor_module_of,
    actor_user_class,
    job_actors,
    job_placement_groups,
    kill_actor,
    owned_refs,
    prestart_workers,
    raylet_socket_name,
    runs_calls_in_order,
    session_dir,
    task_function_manager,
    task_function_of,
    work_senders,
)

__all__ = [
    "actor_id_of",
    "actor_module_of",
    "actor_user_class",
    "alive_node_ids",
    "cluster_gpus",
    "connected",
    "gpus_of_cluster_at",
    "imported",
    "is_ray",
    "job_actors",
    "job_hex",
    "job_placement_groups",
    "joined",
    "kill_actor",
    "load",
    "local_head_address",
    "node_gpus",
    "on_node",
    "other_node_ids",
    "owned_refs",
    "prestart_workers",
    "raylet_socket_name",
    "reachable",
    "reread_settings",
    "runs_calls_in_order",
    "session_dir",
    "stop_cluster",
    "task_function_manager",
    "task_function_of",
    "this_node_id",
    "work_senders",
]
