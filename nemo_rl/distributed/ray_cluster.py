"""Start or join a Ray cluster, and how long to wait on it.

`init_ray()` joins the cluster at `address` or RAY_ADDRESS (Ray's own variable; "auto" is this
machine's `ray start` head); otherwise it starts a local one sized to the machine
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
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import ray

from nemo_rl.utils.child_coverage import child_coverage_env

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
    except Exception:  # noqa: BLE001  no driver, no library, or NVML's own errors: a CPU machine
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


def _ray_processes() -> list[psutil.Process]:
    """This process's children that run Ray's programs (GCS, raylet, dashboard, monitors),
    recognised by the Ray package's directory in their command line."""
    package = os.path.dirname(ray.__file__) + os.sep
    found = []
    for child in psutil.Process().children():
        try:
            if any(arg.startswith(package) or f" {package}" in arg for arg in child.cmdline()):
                found.append(child)
        except psutil.Error:
            continue  # gone, or not ours to read
    return found


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


def _logs_dir(processes: list[psutil.Process]) -> str | None:
    """The session's logs directory, from a Ray process's `--log_dir=`/`--logs-dir=` argument."""
    for process in processes:
        try:
            args = process.cmdline()
        except psutil.Error:
            continue
        for arg in args:
            name, _, value = arg.partition("=")
            if name in ("--log_dir", "--logs-dir") and value:
                return value
    return None


def _clean_up_failed_start(before: set[int]) -> str | None:
    """Stop what a failed `ray.init` left running (the Ray processes it started: the ones not
    in `before`, with their children); return its logs directory, if known."""
    started = [p for p in _ray_processes() if p.pid not in before]
    logs_dir = _logs_dir(started)
    doomed: list[psutil.Process] = []
    for process in started:
        try:
            doomed += [process, *process.children(recursive=True)]
        except psutil.Error:
            continue
    for process in doomed:
        try:
            process.kill()
        except psutil.Error:
            continue  # already gone
    psutil.wait_procs(doomed, timeout=10)
    try:
        ray.shutdown()  # the driver side, when it got that far
    except Exception:  # noqa: BLE001  best effort: the start already failed, and that is what is raised
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
        before = {p.pid for p in _ray_processes()}
        try:
            ray.init(address="local", num_cpus=num_cpus, num_gpus=num_gpus, **kwargs)
            if attempt > 1:
                log.warning("Ray started at attempt %d, after %.0f s", attempt, time.monotonic() - began)
            return
        except Exception as exc:
            if not _is_start_timeout(exc):
                raise
            logs_dir = _clean_up_failed_start(before)
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


def job_runtime_env() -> dict[str, Any]:
    """The runtime environment of this process's Ray job: the variables every worker must get
    unchanged (FORWARDED_ENV, from this process, whoever started the cluster), and coverage for
    the workers when this process is measured (`child_coverage_env`)."""
    env_vars = {**child_coverage_env(), **forwarded_env()}
    return {"env_vars": env_vars} if env_vars else {}


def init_ray(
    num_cpus: int | None = None,
    num_gpus: int | None = None,
    address: str | None = None,
    **init_kwargs: Any,
) -> ClusterInfo:
    """Connect to (or start) Ray once per process; later calls return the same cluster.
    Joins the cluster at `address`, else RAY_ADDRESS; else starts a local one of `num_cpus`
    CPUs and `num_gpus` GPUs (default: this machine's). `init_kwargs` go to `ray.init`
    (`runtime_env` replaces `job_runtime_env()`). All only when this call connects."""
    started_here = False
    if not ray.is_initialized():
        address = address or os.environ.get("RAY_ADDRESS")
        init_kwargs.setdefault("runtime_env", job_runtime_env())
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
    resources = ray.cluster_resources()
    return ClusterInfo(
        address=ray.get_runtime_context().gcs_address,
        started_here=started_here,
        num_cpus=float(resources.get("CPU", 0)),
        num_gpus=float(resources.get("GPU", 0)),
    )
