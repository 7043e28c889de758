"""Start or join a Ray cluster, and how long to wait on it.

`init_ray()` joins an existing cluster when RAY_ADDRESS is set or a `ray start` head is
running on this machine; otherwise it starts a local one sized to the machine
(`start_local_ray`).

Starting Ray on a busy machine: the raylet gives the dashboard agent a fixed ~15 s to
report its ports (Ray 2.x; no setting changes it) and aborts when the agent, a Python
process importing much of Ray, is slower than that; `ray.init` then fails 30 s later with
"The current node timed out during startup". Such an attempt is cleaned up and retried
until NRL_RAY_START_TIMEOUT_S has passed, and then fails with one line saying what was
waited for and where Ray's logs are. Waits on actors (worker groups becoming ready,
reservations, graceful exits) are bounded by NRL_RAY_WAIT_TIMEOUT_S.
"""

from __future__ import annotations

import logging
import math
import os
import re
import socket
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import ray

log = logging.getLogger(__name__)

START_TIMEOUT_ENV = "NRL_RAY_START_TIMEOUT_S"
WAIT_TIMEOUT_ENV = "NRL_RAY_WAIT_TIMEOUT_S"
# Environment that must reach every worker unchanged (multicast must stay off on shared GPUs;
# coverage and the import path are read when the worker process starts).
FORWARDED_ENV = (
    "NCCL_NVLS_ENABLE",
    "TORCH_SYMM_MEM_DISABLE_MULTICAST",
    "NVSHMEM_DISABLE_NVLS",
    "COVERAGE_PROCESS_START",
    "COVERAGE_PROCESS_CONFIG",
    "PYTHONPATH",
)
# A failed attempt on a loaded 2-core machine takes about a minute (the dashboard starts,
# the raylet gives up after ~15 s, ray.init after 30 s more); a good one 10-40 s.
DEFAULT_START_TIMEOUT_S = 300.0
# An actor's constructor: a worker process to start, torch to import, a model to load (a
# minute or two for the tiny test models on a loaded 2-core machine; more for a large model).
DEFAULT_WAIT_TIMEOUT_S = 600.0


class RayStartError(RuntimeError):
    """Ray did not start in time."""


class RayWaitTimeout(TimeoutError):
    """An actor, task or reservation was not ready in time."""


def timeout_from_env(name: str, default: float) -> float:
    """Seconds from environment variable `name` (a positive number), else `default`."""
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not (value > 0 and math.isfinite(value)):
        raise ValueError(f"{name}={raw!r}: expected a number of seconds greater than 0")
    return value


def ray_start_timeout_s() -> float:
    """How long `start_local_ray` keeps trying: NRL_RAY_START_TIMEOUT_S, default 300."""
    return timeout_from_env(START_TIMEOUT_ENV, DEFAULT_START_TIMEOUT_S)


def ray_wait_timeout_s() -> float:
    """How long to wait on actors and reservations: NRL_RAY_WAIT_TIMEOUT_S, default 600."""
    return timeout_from_env(WAIT_TIMEOUT_ENV, DEFAULT_WAIT_TIMEOUT_S)


@dataclass(frozen=True)
class ClusterInfo:
    address: str
    started_here: bool  # this call started a new local cluster
    num_cpus: float
    num_gpus: float


# The harness has its own (testharness.real_ray): the library never imports the harness, nor the harness the library.
def _reachable(address: str, timeout_s: float = 1.0) -> bool:
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=timeout_s):
            return True
    except (OSError, ValueError):
        return False


def local_head_address() -> str | None:
    """Address of a live `ray start` head on this machine, ignoring stale records.

    A killed head leaves `ray_current_cluster` behind; trusting it makes ray.init fail.
    """
    from ray._private.services import find_bootstrap_address

    address = find_bootstrap_address(None)
    return address if address and _reachable(address) else None


def count_local_gpus() -> int:
    """GPUs of this machine that this process may use: NVML's count (no CUDA context is
    created), limited by CUDA_VISIBLE_DEVICES as CUDA (and Ray's own detection) would."""
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            present = int(pynvml.nvmlDeviceGetCount())
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # no driver / no library: a CPU machine
        return 0
    return visible_gpu_count(present, os.environ.get("CUDA_VISIBLE_DEVICES"))


def visible_gpu_count(present: int, cuda_visible_devices: str | None) -> int:
    """How many of `present` GPUs CUDA_VISIBLE_DEVICES leaves visible: unset, all of them;
    otherwise the entries up to the first invalid one ("" and "-1" hide every GPU)."""
    if cuda_visible_devices is None:
        return present
    entries = 0
    for entry in cuda_visible_devices.split(","):
        entry = entry.strip()
        if not entry or entry.startswith("-"):
            break
        entries += 1
    return min(entries, present)


_TIMED_OUT = re.compile(r"timed out|timeout|deadline exceeded", re.IGNORECASE)


def _is_start_timeout(exc: BaseException) -> bool:
    """A start that ran out of one of Ray's own fixed waits (worth another attempt), as
    opposed to a wrong argument or a broken installation (raised at once)."""
    return isinstance(exc, TimeoutError) or bool(_TIMED_OUT.search(str(exc)))


def _failed_node(exc: BaseException) -> Any:
    """The `ray._private.node.Node` whose constructor raised `exc`, if any: its processes
    (GCS, dashboard, monitor, raylet) are still running and nothing else will stop them."""
    try:
        from ray._private.node import Node
    except ImportError:  # another Ray layout: nothing to clean up by hand
        return None
    tb = exc.__traceback__
    while tb is not None:
        candidate = tb.tb_frame.f_locals.get("self")
        if isinstance(candidate, Node):
            return candidate
        tb = tb.tb_next
    return None


def _raylet_reason(logs_dir: str | None) -> str | None:
    """The raylet's fatal line, shortened ("Timed out waiting for file metrics_agent_port_…")."""
    if not logs_dir:
        return None
    try:
        text = (Path(logs_dir) / "raylet.out").read_text(errors="replace")
    except OSError:
        return None
    fatal = [line for line in text.splitlines() if "Check failed" in line]
    if not fatal:
        return None
    reason = fatal[-1].split("Check failed:", 1)[1].strip()
    reason = reason.split(" ", 1)[1] if " " in reason else reason  # drop the failed expression
    reason = re.sub(r"\S*/(\S+)", r"\1", reason)  # paths -> file names
    reason = re.sub(r"_[0-9a-f]{16,}", "_<node>", reason)
    if "agent_port" in reason:
        reason += " (a Ray agent process started too slowly)"
    return reason[:200]


def _clean_up_failed_start(exc: BaseException) -> str | None:
    """Stop what a failed `ray.init` left running; return its logs directory, if known."""
    node = _failed_node(exc)
    logs_dir = None
    if node is not None:
        try:
            logs_dir = node.get_logs_dir_path()
        except Exception:  # noqa: BLE001  diagnostics only
            pass
        try:
            node.kill_all_processes(check_alive=False, allow_graceful=False, wait=True)
        except Exception as kill_error:  # noqa: BLE001  best effort; the reaper ends them at exit
            log.warning("could not stop the processes of a failed Ray start: %s", kill_error)
    try:
        ray.shutdown()  # the driver side, when it got that far
    except Exception:  # noqa: BLE001
        pass
    return logs_dir


def start_local_ray(
    num_cpus: int | None = None,
    num_gpus: int | None = None,
    timeout_s: float | None = None,
    **init_kwargs: Any,
) -> None:
    """Start a new local Ray cluster in this process (never joins one), retrying attempts
    that ran out of Ray's own start-up waits until `timeout_s` (NRL_RAY_START_TIMEOUT_S,
    default 300) has passed; then raise RayStartError saying what was waited for."""
    timeout = timeout_s if timeout_s is not None else ray_start_timeout_s()
    # No `_node_ip_address="127.0.0.1"`: another process joining (an xdist worker, RAY_ADDRESS)
    # turns a loopback address into the machine's own, where Ray 2.46's GCS would not listen
    # (2.60 listens on every interface and ignores the pin).
    kwargs: dict[str, Any] = {"include_dashboard": False, **init_kwargs}
    if "RAY_worker_niceness" not in os.environ:
        # Ray renices its workers to 15 so they cannot starve the driver; here the workers are
        # the job (the driver mostly waits on them), and at nice 15 beside any busy process
        # they get ~3% of a core: importing torch in an actor then takes minutes.
        kwargs["_system_config"] = {"worker_niceness": 0, **kwargs.get("_system_config", {})}
    began = time.monotonic()
    attempt = 0
    while True:
        attempt += 1
        attempt_began = time.monotonic()
        try:
            ray.init(address="local", num_cpus=num_cpus, num_gpus=num_gpus, **kwargs)
            if attempt > 1:
                log.warning("Ray started at attempt %d, after %.0f s", attempt, time.monotonic() - began)
            return
        except Exception as exc:
            if not _is_start_timeout(exc):
                raise
            logs_dir = _clean_up_failed_start(exc)
            now = time.monotonic()
            first_line = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            detail = first_line.split(". ")[0]
            raylet = _raylet_reason(logs_dir)
            if raylet:
                detail += f"; raylet: {raylet}"
            if now - began >= timeout:
                where = f"; Ray's logs: {logs_dir}" if logs_dir else ""
                raise RayStartError(
                    f"Ray did not start within {timeout:g} s ({attempt} attempt(s) in {now - began:.0f} s; "
                    f"last: {detail}{where}). The machine may be too busy: set {START_TIMEOUT_ENV} "
                    f"to keep trying longer."
                ) from None
            log.warning(
                "Ray start attempt %d failed after %.0f s (%s); trying again", attempt, now - attempt_began, detail
            )


def forwarded_env() -> dict[str, str]:
    """This process's values of FORWARDED_ENV (those it has)."""
    return {k: os.environ[k] for k in FORWARDED_ENV if k in os.environ}


def job_runtime_env(warm_workers: int = 0) -> dict[str, Any]:
    """The runtime environment of this process's Ray job: the variables every worker must get
    unchanged (FORWARDED_ENV, from this process, whoever started the cluster), and the warm
    workers' import hook when asked for."""
    env: dict[str, Any] = {}
    forwarded = forwarded_env()
    if forwarded:
        env["env_vars"] = forwarded
    if warm_workers > 0:
        from nemo_rl.distributed.warm_workers import PRELOAD_HOOK

        env["worker_process_setup_hook"] = PRELOAD_HOOK
    return env


def init_ray(
    num_cpus: int | None = None,
    num_gpus: int | None = None,
    warm_workers: int = 0,
    **init_kwargs: Any,
) -> ClusterInfo:
    """Connect to (or start) Ray once per process; later calls return the same cluster.
    `warm_workers`: idle workers, torch and transformers imported, started on this node for
    this job's next actors (nemo_rl.distributed.warm_workers); `init_kwargs` go to `ray.init`.
    Both only when this call connects."""
    started_here = False
    if not ray.is_initialized():
        address = os.environ.get("RAY_ADDRESS") or local_head_address()
        init_kwargs.setdefault("runtime_env", job_runtime_env(warm_workers))
        if address:
            init_kwargs.setdefault("log_to_driver", True)
            ray.init(address=address, **init_kwargs)
        else:
            start_local_ray(
                num_cpus=num_cpus if num_cpus is not None else os.cpu_count() or 1,
                num_gpus=num_gpus if num_gpus is not None else count_local_gpus(),
                **init_kwargs,
            )
            started_here = True
        if warm_workers > 0:
            from nemo_rl.distributed.warm_workers import prestart

            prestart(warm_workers)
    resources = ray.cluster_resources()
    return ClusterInfo(
        address=ray.get_runtime_context().gcs_address,
        started_here=started_here,
        num_cpus=float(resources.get("CPU", 0)),
        num_gpus=float(resources.get("GPU", 0)),
    )
