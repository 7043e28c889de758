"""Readings for the leak check: this process's Ray job (GCS), its children (/proc), its GPUs (NVML).

Nothing here starts Ray or imports it when the process has not: a test run without Ray reads
processes and GPUs only. Every reading is cheap enough to take around every test (see
bench/hygiene_overhead.py): one GCS call for the job's actors, one for placement groups, a walk
of /proc/<pid>/task/*/children from this process, and NVML's counters with NVML left open.

Actors and placement groups are read from the GCS through the client Ray already holds for
this driver (real_ray.job_actors, real_ray.job_placement_groups: Ray's private API, one GCS
call each). Only this driver's job is read, so xdist workers sharing one cluster never see
each other's actors.
"""

from __future__ import annotations

import os
from typing import Any

from testharness import real_ray
from testharness.hygiene.core import Actor, Group, Proc, Snapshot

MIB = 1024 * 1024


# --- processes ---------------------------------------------------------------------------


def _ray_markers() -> tuple[str, ...]:
    markers = ["/site-packages/ray/", "/dist-packages/ray/"]
    ray = real_ray.imported()
    if ray is not None and getattr(ray, "__file__", None):
        markers.append(os.path.dirname(str(ray.__file__)) + "/")
    return tuple(markers)


def is_ray_process(title: str, markers: tuple[str, ...]) -> bool:
    """Ray's own processes (GCS, raylet, dashboard, log monitor, workers `ray::...`): the Ray
    check covers what runs in them; their subtree is never a test's child process."""
    if title.startswith("ray::"):
        return True
    head = title[:600]
    return any(m in head for m in markers) or head.split(" ", 1)[0].endswith(("/raylet", "/gcs_server"))


def _children(pid: int) -> list[int]:
    kids: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return kids
    for tid in tasks:
        try:
            with open(f"/proc/{pid}/task/{tid}/children", encoding="ascii") as fh:
                kids.extend(int(x) for x in fh.read().split())
        except (OSError, ValueError):
            continue
    return kids


def job_of(pid: int) -> str | None:
    """The Ray job a worker process was started for (the raylet puts RAY_JOB_ID in its
    environment); None when it names none (a worker started before any job asked for it:
    the nil id, ffffffff, in Ray 2.46) or cannot be read."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as fh:
            for entry in fh.read().split(b"\0"):
                if entry.startswith(b"RAY_JOB_ID="):
                    job = entry.partition(b"=")[2].decode("ascii", "replace")
                    return None if not job.strip("f") else job
    except OSError:
        pass
    return None


def _title(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return fh.read().replace(b"\0", b" ").decode("utf-8", "replace").strip()
    except OSError:
        return ""


def _stat(pid: int) -> tuple[str, float] | None:
    """(state letter, start time in clock ticks) from /proc/<pid>/stat, None when gone."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as fh:
            text = fh.read()
    except OSError:
        return None
    fields = text.rsplit(")", 1)[-1].split()
    try:
        return fields[0], float(fields[19])
    except (IndexError, ValueError):
        return None


_HAS_PROC_CHILDREN = os.path.exists(f"/proc/{os.getpid()}/task/{os.getpid()}/children")


def child_processes(root_pid: int | None = None) -> dict[tuple[int, float], Proc]:
    """Running descendants of this process, Ray's processes and their subtrees left out."""
    root = os.getpid() if root_pid is None else root_pid
    if not _HAS_PROC_CHILDREN:
        return _child_processes_psutil(root)
    markers = _ray_markers()
    found: dict[tuple[int, float], Proc] = {}
    stack = [root]
    while stack:
        for pid in _children(stack.pop()):
            stat = _stat(pid)
            if stat is None or stat[0] in ("Z", "X"):  # gone, or exited and not yet reaped
                continue
            title = _title(pid)
            if is_ray_process(title, markers):
                continue
            found[(pid, stat[1])] = Proc(pid, stat[1], title)
            stack.append(pid)
    return found


def _child_processes_psutil(root: int) -> dict[tuple[int, float], Proc]:
    try:
        import psutil
    except ImportError:
        return {}
    markers = _ray_markers()
    found: dict[tuple[int, float], Proc] = {}
    try:
        stack = [psutil.Process(root)]
    except psutil.Error:
        return found
    while stack:
        try:
            kids = stack.pop().children()
        except psutil.Error:
            continue
        for p in kids:
            try:
                if p.status() == psutil.STATUS_ZOMBIE:
                    continue
                title = " ".join(p.cmdline())
                start = p.create_time()
            except psutil.Error:
                continue
            if is_ray_process(title, markers):
                continue
            found[(p.pid, start)] = Proc(p.pid, start, title)
            stack.append(p)
    return found


def alive(pid: int, start: float) -> bool:
    stat = _stat(pid)
    return stat is not None and stat[0] not in ("Z", "X") and (not _HAS_PROC_CHILDREN or stat[1] == start)


# --- GPUs --------------------------------------------------------------------------------


class Gpus:
    """Memory in use per GPU, NVML kept open between readings (nvmlInit costs ~10 ms)."""

    def __init__(self) -> None:
        self._nvml: Any = None
        self._handles: list[Any] | None = None
        self._cluster: bool | None = None  # several Ray nodes: read them all through Ray

    def _local(self) -> dict[str, float]:
        if self._handles is None:
            self._handles = []
            try:
                import pynvml  # type: ignore[import-untyped,unused-ignore]
            except ImportError:  # no NVML library: a machine without GPUs
                return {}
            try:
                pynvml.nvmlInit()
                self._nvml = pynvml
                self._handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
            except pynvml.NVMLError:  # no driver: a machine without GPUs
                self._handles = []
        out = {}
        for i, handle in enumerate(self._handles):
            try:
                out[f"local:{i}"] = self._nvml.nvmlDeviceGetMemoryInfo(handle).used / MIB
            except Exception:  # noqa: BLE001  NVMLError of one GPU: the others are still read
                continue
        return out

    def read(self) -> dict[str, float]:
        """This machine's GPUs; every node's when the connected Ray cluster has several."""
        ray = real_ray.connected()
        if ray is not None and self._cluster is None:
            try:
                self._cluster = len(real_ray.alive_node_ids(ray)) > 1
            except Exception:  # noqa: BLE001  a cluster going away (any Ray error): this node alone
                self._cluster = False
        if ray is not None and self._cluster:
            from testharness import gpu

            try:
                return {
                    f"node{n}:{i}": used
                    for n, node in enumerate(gpu.cluster_readings(timeout_s=30))
                    for i, used in enumerate(node.gpu_used_mib)
                }
            except Exception:  # noqa: BLE001  a node that cannot answer: this machine's reading below
                pass
        return self._local()

    def close(self) -> None:
        if self._nvml is not None and self._handles:
            try:
                self._nvml.nvmlShutdown()
            except Exception:  # noqa: BLE001  NVML already shut down: nothing left to release
                pass
        self._handles, self._nvml = None, None


def snapshot(gpus: Gpus | None) -> Snapshot:
    """One reading: this job's actors and groups (when Ray is connected), processes, GPUs."""
    ray = real_ray.connected()
    actors: dict[str, Actor] = {}
    groups: dict[str, Group] = {}
    read_ray = False
    if ray is not None:
        try:
            job = real_ray.job_hex(ray)
            actors, groups = real_ray.job_actors(ray, job), real_ray.job_placement_groups(job)
            read_ray = True
        except Exception:  # noqa: BLE001  the cluster is going away: nothing to read
            actors, groups = {}, {}
    return Snapshot(
        actors=actors,
        groups=groups,
        procs=child_processes(),
        gpus=gpus.read() if gpus is not None else {},
        ray=read_ray,
    )
