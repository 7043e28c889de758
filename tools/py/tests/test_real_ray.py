"""The harness's calls into Ray (testharness.real_ray), against this environment's real Ray.

Ray's private API changes between releases, and where it does, every caller falls back
quietly (no task workers in a hang report, actors killed by pid, no leak check of actors): a
suite that only watched the callers would pass on a Ray that broke them. So each private call
is asked here for a true answer, on every Ray of the range tools/py/pyproject.toml declares
(CI runs this suite at both ends). Whether `ray` is the real Ray at all is
test_merely_installed.py's.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

from testharness import real_ray


def _wait_until(condition: Any, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "not within the time"
        time.sleep(0.2)


def _process_ended(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE  # ended, not yet reaped
    except psutil.NoSuchProcess:
        return True


def test_reachable_is_a_listening_host_port() -> None:
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        address = f"127.0.0.1:{server.getsockname()[1]}"
        assert real_ray.reachable(address)
    assert not real_ray.reachable(address)  # closed now
    assert not real_ray.reachable("no-port-here") and not real_ray.reachable("127.0.0.1:http")


def test_local_head_address_is_the_recorded_head_only_while_it_answers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RAY_TMPDIR", str(tmp_path))  # where `ray start` records its head
    assert real_ray.local_head_address() is None  # no record
    record = tmp_path / "ray" / "ray_current_cluster"
    record.parent.mkdir()
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        address = f"127.0.0.1:{server.getsockname()[1]}"
        record.write_text(address + "\n")
        assert real_ray.local_head_address() == address
    assert real_ray.local_head_address() is None  # a stale record of a head that is gone


def test_on_node_runs_zero_cpu_tasks_and_actors_on_that_node(ray_cluster: Any) -> None:
    ray = ray_cluster
    here = real_ray.this_node_id(ray)
    assert here in real_ray.alive_node_ids(ray)

    def where() -> tuple[str, dict[str, float]]:
        import ray as r

        context = r.get_runtime_context()
        return str(context.get_node_id()), dict(context.get_assigned_resources())

    assert ray.get(real_ray.on_node(ray, where, here).remote(), timeout=120) == (here, {})

    class Where:
        def where(self) -> tuple[str, dict[str, float]]:
            return where()

    actor = real_ray.on_node(ray, Where, here, name="testharness-on-node").remote()
    try:
        assert ray.get(actor.where.remote(), timeout=120) == (here, {})
        assert ray.get_actor("testharness-on-node") is not None  # the options are Ray's own
    finally:
        ray.kill(actor)


def test_cluster_gpus_is_the_clusters_gpu_total(ray_cluster: Any) -> None:
    ray = ray_cluster
    assert real_ray.cluster_gpus(ray) == int(ray.cluster_resources().get("GPU", 0))
    assert real_ray.node_gpus(ray, real_ray.this_node_id(ray)) == sum(
        n["Resources"].get("GPU", 0) for n in ray.nodes() if n["NodeID"] == real_ray.this_node_id(ray)
    )
    assert real_ray.node_gpus(ray, "ff" * 28) == 0  # no such node


def test_gpus_of_cluster_at_joins_counts_and_leaves(ray_cluster: Any) -> None:
    address = ray_cluster.get_runtime_context().gcs_address
    code = (
        "import sys; from testharness import real_ray; "
        "n = real_ray.gpus_of_cluster_at(sys.argv[1]); import ray; print(n, ray.is_initialized())"
    )
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    out = subprocess.run(
        [sys.executable, "-c", code, address], env=env, capture_output=True, text=True, timeout=300, check=False
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split()[-2:] == [str(real_ray.cluster_gpus(ray_cluster)), "False"], out.stdout


def test_job_actors_and_placement_groups_come_from_the_gcs(ray_cluster: Any) -> None:
    ray = ray_cluster
    from ray.util.placement_group import placement_group, remove_placement_group

    @ray.remote(num_cpus=0)
    class Named:
        def pid(self) -> int:
            return os.getpid()

    job = real_ray.job_hex(ray)
    actor = Named.options(name="testharness-gcs-read").remote()
    group = placement_group([{"CPU": 0.01}], strategy="SPREAD", name="testharness-gcs-group")
    try:
        pid = ray.get(actor.pid.remote(), timeout=120)
        ray.get(group.ready(), timeout=120)
        actors = real_ray.job_actors(ray, job)
        (found,) = [a for a in actors.values() if a.name == "testharness-gcs-read"]
        assert (found.class_name.rsplit(".", 1)[-1], found.pid, found.state) == ("Named", pid, "ALIVE")
        assert found.node_id == real_ray.this_node_id(ray) and not found.detached
        groups = real_ray.job_placement_groups(job)
        (pg,) = [g for g in groups.values() if g.name == "testharness-gcs-group"]
        assert (pg.id, pg.strategy, pg.bundles, pg.state) == (group.id.hex(), "SPREAD", 1, "CREATED")
        other_job = "ff" + job[2:]
        assert found.id not in real_ray.job_actors(ray, other_job)
        assert pg.id not in real_ray.job_placement_groups(other_job)

        real_ray.kill_actor(ray, found.id)  # by id: no handle needed
        _wait_until(lambda: found.id not in real_ray.job_actors(ray, job))  # dead ones are left out
        # The GCS marks the actor dead before its process has ended: a call meanwhile can still
        # be answered (seen once with Ray 2.46), so the call waits for the process's end.
        _wait_until(lambda: _process_ended(pid))
        with pytest.raises(ray.exceptions.RayActorError):
            ray.get(actor.pid.remote(), timeout=120)
        remove_placement_group(group)
        _wait_until(lambda: pg.id not in real_ray.job_placement_groups(job))  # so are removed ones
    finally:
        ray.kill(actor)
        remove_placement_group(group)


def test_owned_refs_hold_an_unfinished_task_and_the_raylet_socket_names_its_process(ray_cluster: Any) -> None:
    ray = ray_cluster

    @ray.remote(num_cpus=0)
    def sleeps() -> None:
        time.sleep(300)

    ref = sleeps.remote()
    try:
        owned = real_ray.owned_refs(ray)
        assert owned is not None and ref.hex() in {r.hex() for r in owned}
    finally:
        ray.cancel(ref, force=True)
    socket_name = real_ray.raylet_socket_name(ray)
    assert socket_name
    titles = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            titles.append(Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace"))
        except OSError:
            continue
    assert any(f"--raylet_socket_name={socket_name}" in t for t in titles)


def test_task_function_manager_hands_out_the_function_of_each_task() -> None:
    manager = real_ray.task_function_manager()
    assert manager is not None and callable(getattr(manager, "get_execution_info", None))


def test_stop_cluster_ends_the_monitor_first_and_every_process_of_the_cluster() -> None:
    # In a process of its own: the cluster it starts is the one it stops.
    script = """
import sys, ray
from testharness import real_ray
ray.init(address="local", include_dashboard=False, num_cpus=1)
node = ray._private.worker._global_node
procs = {kind: [i.process for i in infos] for kind, infos in node.all_processes.items()}
assert procs.get("monitor") and procs.get("raylet") and procs.get("gcs_server"), sorted(procs)
real_ray.stop_cluster(ray)
assert not ray.is_initialized()
codes = {kind: [p.poll() for p in ps] for kind, ps in procs.items()}
print(codes)
assert all(code is not None for cs in codes.values() for code in cs), codes  # every process ended
assert codes["monitor"] == [-9], codes  # killed first, not given Ray's second on SIGTERM
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, out.stdout + out.stderr[-3000:]


def test_what_the_remote_selector_reads_of_actors_and_tasks(ray_cluster: Any) -> None:
    # What remote selection wraps and reads (reach.py, worker_trace.py), asked of this Ray.
    # The classes and the function are local: cloudpickle ships them by value.
    ray = ray_cluster

    class InOrder:
        def actor_id(self) -> str:
            return str(ray.get_runtime_context().get_actor_id())

    class Async:
        async def ping(self) -> int:
            return 1

    def double(x: int) -> int:
        return 2 * x

    senders = real_ray.work_senders(ray)
    assert len(senders) == 3 and all(callable(getattr(owner, name)) for owner, name in senders)
    in_order = ray.remote(num_cpus=0)(InOrder)
    cls = real_ray.actor_user_class(in_order)
    assert cls is not None and issubclass(cls, InOrder) and cls.__module__ == __name__
    assert real_ray.runs_calls_in_order(in_order, {})
    assert not real_ray.runs_calls_in_order(in_order, {"max_concurrency": 4})
    assert not real_ray.runs_calls_in_order(ray.remote(num_cpus=0)(Async), {})
    handle = in_order.remote()
    try:
        assert real_ray.actor_id_of(handle) == ray.get(handle.actor_id.remote(), timeout=120)
        assert real_ray.actor_module_of(handle) == __name__
    finally:
        ray.kill(handle)
    assert real_ray.actor_id_of(object()) is None and real_ray.actor_user_class(InOrder) is None
    assert real_ray.task_function_of(ray.remote(num_cpus=0)(double)) is double
