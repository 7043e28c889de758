"""Hang diagnosis: the stacks of a hung test's processes, where they are stuck, and their end.

Stacks come from `py-spy dump` (a wheel in the test group), attached from outside: a hung
actor cannot run anything we would ask it to (its only thread is in the stuck call, and
ray.get in the test process does not even deliver a Python signal handler's exception), and
py-spy needs no cooperation from the workers, which may be started by a cluster the harness
did not configure (RAY_ADDRESS) or from a different environment. Where py-spy may not attach
(ptrace forbidden: kernel.yama.ptrace_scope >= 1 without CAP_SYS_PTRACE), the stack entry says
so and the reason still names the actor class and method from the worker's process title
(`ray::Class.method`). Workers on other nodes are dumped by a zero-CPU Ray task pinned to the
node (real_ray.on_node), which runs py-spy there.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from testharness import real_ray
from testharness.hygiene import probe
from testharness.hygiene.core import (
    Actor,
    Proc,
    Snapshot,
    Stack,
    Stuck,
    Thread,
    actor_stuck,
    driver_stuck,
    frames_of_python,
    hang_reason,
    hang_record,
    parse_pyspy_json,
)

PYSPY_TIMEOUT_S = 20.0
# Ray's kill and force-cancel are asynchronous: the hung processes are waited for this long,
# then SIGKILLed, so the next test never shares the machine with them.
EXIT_WAIT_S = 5.0
# A cancelled task can still be started again (below, end_task_retries): how long a new worker
# running it is looked for, and how many times such a retry is ended.
RETRY_WATCH_S = 3.0
RETRY_ROUNDS = 3


def pyspy_path() -> str | None:
    here = os.path.join(os.path.dirname(sys.executable), "py-spy")
    return here if os.access(here, os.X_OK) else shutil.which("py-spy")


def _run_pyspy(exe: str | None, pid: int) -> tuple[int, str, str]:
    if exe is None:
        return 127, "", "py-spy is not installed (pip install py-spy)"
    try:
        proc = subprocess.run(
            [exe, "dump", "--json", "--full-filenames", "--pid", str(pid)],
            capture_output=True,
            text=True,
            timeout=PYSPY_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        return 1, "", str(exc)
    return proc.returncode, proc.stdout, proc.stderr


def _first_error_line(stderr: str) -> str:
    for line in stderr.splitlines():
        line = line.strip()
        if line and not line.startswith(("Caused by", "Stack backtrace")):
            return line.removeprefix("Error: ")[:200]
    return "py-spy failed"


def _stack(label: str, pid: int, result: tuple[int, str, str], root: str, actor_class: str = "") -> Stack:
    rc, out, err = result
    if rc != 0:
        if "Permission denied" in err or "Operation not permitted" in err:
            return Stack(label, pid, error="py-spy may not attach (ptrace forbidden here)", actor_class=actor_class)
        return Stack(label, pid, error=_first_error_line(err), actor_class=actor_class)
    try:
        return Stack(label, pid, parse_pyspy_json(out, root), actor_class=actor_class)
    except ValueError as exc:
        return Stack(label, pid, error=str(exc), actor_class=actor_class)


def _remote_dump(ray: Any, node_id: str, pids: list[int], exe: str | None) -> list[tuple[int, str, str]]:
    """py-spy on another node, from a zero-CPU task pinned there (built in this function so
    cloudpickle ships it by value: workers need not import testharness)."""

    def dump(pids: list[int], exe: str | None) -> list[tuple[int, str, str]]:
        import subprocess as sp

        out = []
        for pid in pids:
            try:
                p = sp.run([exe or "py-spy", "dump", "--json", "--full-filenames", "--pid", str(pid)],
                           capture_output=True, text=True, timeout=20, check=False)  # fmt: skip
                out.append((p.returncode, p.stdout, p.stderr))
            except Exception as exc:  # noqa: BLE001  runs on another node: any error is that stack's, never the diagnosis's
                out.append((1, "", str(exc)))
        return out

    try:
        task = real_ray.on_node(ray, dump, node_id)
        return list(ray.get(task.remote(pids, exe), timeout=PYSPY_TIMEOUT_S + 10))
    except Exception as exc:  # noqa: BLE001  a node that cannot answer (any Ray error): said in its stacks
        return [(1, "", f"could not reach node {node_id[:8]}: {exc}")] * len(pids)


def _local_raylet_pid(ray: Any) -> int | None:
    """This node's raylet: the process started with this driver's raylet socket (None where
    this Ray does not say which: then no task workers are dumped)."""
    socket_name = real_ray.raylet_socket_name(ray)
    if socket_name is None:
        return None
    for entry in os.listdir("/proc"):
        if entry.isdigit() and f"--raylet_socket_name={socket_name}" in probe._title(int(entry)):
            return int(entry)
    return None


def _task_workers(raylet_pid: int | None, skip: set[int], job: str) -> list[Proc]:
    """This node's Ray workers running a task of this job (title `ray::name`: not idle, not an
    agent, not one of this job's actors). Under `-n` the xdist workers share one cluster,
    each its own job: a worker started for another job (RAY_JOB_ID) is another test's and is
    left out (its busy __init__ once became this test's hang reason); one whose environment
    names no job is kept, as it may be this job's."""
    if raylet_pid is None:
        return []
    found = []
    for pid in probe._children(raylet_pid):
        title = probe._title(pid)
        if pid in skip or not title.startswith("ray::"):
            continue
        if title.startswith(("ray::IDLE", "ray::DashboardAgent", "ray::RuntimeEnvAgent")):
            continue
        if probe.job_of(pid) not in (None, job):
            continue
        found.append(Proc(pid, 0.0, title))
    return found


@dataclass
class Diagnosis:
    reason: str
    record: dict[str, Any]
    text: str  # every stack, for the log
    main_in_ray: bool = False  # the test process's main thread is inside Ray (ray.get, ray.wait)
    ending: tuple[Proc, ...] = ()  # this node's processes to end, titled as they were when diagnosed
    task_workers: tuple[Proc, ...] = ()  # those of `ending` that ran tasks (which Ray may retry)


def driver_stack(main_ident: int | None, root: str) -> tuple[Stack, tuple[Any, ...]]:
    """This process's threads (the test runs in the main one), innermost frame first."""
    threads = []
    main_frames: tuple[Any, ...] = ()
    names = {t.ident: t.name for t in threading.enumerate()}
    for ident, frame in sys._current_frames().items():
        if ident == threading.get_ident():
            continue  # the watchdog itself
        frames = frames_of_python(((f.name, f.filename, f.lineno or 0) for f in traceback.extract_stack(frame)), root)
        name = names.get(ident, str(ident))
        if ident == main_ident:
            main_frames = frames
            name = "MainThread"
        threads.append(Thread(name, frames))
    threads.sort(key=lambda t: t.name != "MainThread")
    return Stack(f"test process (pid {os.getpid()})", os.getpid(), tuple(threads)), main_frames


def diagnose(
    timeout_s: float, before: Snapshot, test_file: str, root: str, main_ident: int | None, what: str = "the test"
) -> tuple[Diagnosis, list[Actor], list[Proc]]:
    """Stacks of the test process, of every live actor of this job and of this node's workers
    running this job's tasks; the reason; and what to end (the actors the test created or
    that are stuck in a call, the test's child processes, the task workers)."""
    driver, main_frames = driver_stack(main_ident, root)
    stacks: list[Stack] = [driver]
    actors: list[Actor] = []
    local: list[Actor] = []
    tasks: list[Proc] = []
    ray = real_ray.connected()
    exe = pyspy_path()
    if ray is not None:
        try:
            job = real_ray.job_hex(ray)
            actors = sorted(real_ray.job_actors(ray, job).values(), key=lambda a: (a.class_name, a.id))
            here = real_ray.this_node_id(ray)
            tasks = _task_workers(_local_raylet_pid(ray), {a.pid for a in actors if a.node_id == here}, job)
        except Exception:  # noqa: BLE001  a cluster going away (any Ray error): the test process's stack alone
            actors, tasks, here = [], [], ""
        local = [a for a in actors if a.node_id == here and a.pid]
        remote: dict[str, list[Actor]] = {}
        for a in actors:
            if a.node_id != here and a.pid:
                remote.setdefault(a.node_id, []).append(a)
        with ThreadPoolExecutor(max_workers=8) as pool:
            local_results = list(pool.map(lambda p: _run_pyspy(exe, p), [a.pid for a in local]))
            task_results = list(pool.map(lambda p: _run_pyspy(exe, p.pid), tasks))
            remote_results = {
                n: pool.submit(_remote_dump, ray, n, [a.pid for a in group], exe) for n, group in remote.items()
            }
            for a, res in zip(local, local_results, strict=True):
                stacks.append(_stack(_actor_label(a), a.pid, res, root, a.class_name))
            for t, res in zip(tasks, task_results, strict=True):
                stacks.append(_stack(f"task worker {t.title} (pid {t.pid})", t.pid, res, root))
            for n, fut in remote_results.items():
                for a, res in zip(remote[n], fut.result(), strict=True):
                    stacks.append(_stack(_actor_label(a), a.pid, res, root, a.class_name))
    stuck: list[Stuck] = []
    for s in stacks[1:]:
        found = actor_stuck(s)
        if found is None and s.error and s.actor_class:
            title = probe._title(s.pid)  # without a stack, the title still says the method
            if title.startswith(f"ray::{s.actor_class}."):
                found = _title_only(s, title)
        if found is not None:
            stuck.append(found)
    reason = hang_reason(timeout_s, stuck, driver_stuck(main_frames, test_file), what)
    text = "\n".join([reason, *(s.text() for s in stacks)])
    busy_pids = {s.pid for s in stacks[1:] if actor_stuck(s) is not None}
    to_end = [a for a in actors if a.id not in before.actors or a.pid in busy_pids]
    new_procs = [p for k, p in probe.child_processes().items() if k not in before.procs]
    # Task workers are ended by cancel_tasks (a killed one would be retried), not killed here.
    in_ray = any(f.file.startswith("ray/") for f in main_frames)
    ending = (*(Proc(a.pid, 0.0, probe._title(a.pid)) for a in to_end if a in local), *tasks)
    diagnosis = Diagnosis(reason, hang_record(timeout_s, reason, stuck, stacks), text, in_ray, ending, tuple(tasks))
    return diagnosis, to_end, new_procs


def _title_only(stack: Stack, title: str) -> Stuck:
    from testharness.hygiene.core import Frame

    method = title.removeprefix("ray::").split(" ", 1)[0]
    frame = Frame(method, "<line unknown: " + stack.error + ">", 0)
    return Stuck(f"actor {method}", frame, frame)


def _actor_label(a: Actor) -> str:
    name = f" {a.name!r}" if a.name else ""
    return f"actor {a.class_name}{name} (pid {a.pid}, node {a.node_id[:8]})"


def end_actors(actors: list[Actor]) -> None:
    """Kill actors by id, no restart (what ray.kill does with a handle)."""
    ray = real_ray.connected()
    if ray is None:
        return
    for a in actors:
        try:
            real_ray.kill_actor(ray, a.id)
        except Exception:  # noqa: BLE001  already dead, or this Ray's private API differs: the process, by pid
            try:  # a local process at least
                if a.pid:
                    os.kill(a.pid, signal.SIGKILL)
            except OSError:
                pass


def cancel_tasks() -> None:
    """Cancel (force: the worker is ended, the task not retried) every task this process owns
    that has not finished; a killed task worker would only be retried by Ray."""
    ray = real_ray.connected()
    if ray is None:
        return
    for ref in real_ray.owned_refs(ray) or []:  # None: this Ray's private API differs, nothing to cancel
        try:
            ray.cancel(ref, force=True, recursive=True)
        except Exception:  # noqa: BLE001  finished, an actor task (its actor is killed instead), a ray.put object
            continue


def await_ended(procs: Sequence[Proc], wait_s: float = EXIT_WAIT_S) -> list[int]:
    """Wait until none of `procs` still does the work it was titled with (it exited, or Ray
    reused a task worker for other work); SIGKILL those that outlast `wait_s`. The pids still
    there after that."""
    left = _still_running(procs, wait_s)
    for p in left:
        try:
            os.kill(p.pid, signal.SIGKILL)
        except OSError:
            pass
    return [p.pid for p in _still_running(left, 2.0)]


def _same_work(title: str, now: str) -> bool:
    """Whether a process titled `title` when diagnosed still does that work, titled `now`: the
    same title, or its actor's idle title (`ray::Rank` for `ray::Rank.all_reduce`: an actor
    being killed leaves its method before its process ends, and never serves another)."""
    return bool(now) and (now == title or title.startswith(now + "."))


def _still_running(procs: Sequence[Proc], wait_s: float) -> list[Proc]:
    deadline = time.monotonic() + wait_s
    while True:
        left = [p for p in procs if p.title and _same_work(p.title, probe._title(p.pid))]
        if not left or time.monotonic() >= deadline:
            return left
        time.sleep(0.05)


def end_task_retries(ended: Sequence[Proc], watch_s: float = RETRY_WATCH_S, rounds: int = RETRY_ROUNDS) -> list[int]:
    """End the tasks Ray starts again after their workers were ended: a force-cancel that races
    its worker's death can still retry the task (ray-project/ray#54260; seen once in CI: the next
    test met a new `ray::stuck_task`), and a task worker SIGKILLed after the cancel is retried.
    Looks for `watch_s` for this job's task workers titled as an ended one was, cancels this
    process's tasks again and ends those workers, at most `rounds` times. The pids left."""
    titles = {p.title for p in ended if p.title}
    ray = real_ray.connected()
    if not titles or ray is None:
        return []
    try:
        job, raylet = real_ray.job_hex(ray), _local_raylet_pid(ray)
    except Exception:  # noqa: BLE001  a cluster going away: nothing can be started again
        return []
    known = {p.pid for p in ended}
    left: list[int] = []
    for _ in range(rounds):
        deadline = time.monotonic() + watch_s
        while not (retries := [p for p in _task_workers(raylet, known, job) if p.title in titles]):
            if time.monotonic() >= deadline:
                return left
            time.sleep(0.1)
        known.update(p.pid for p in retries)
        cancel_tasks()
        left = await_ended(retries)
    return left


def end_processes(procs: list[Proc]) -> None:
    """SIGKILL the processes, children first (a parent may respawn them)."""
    for p in sorted(procs, key=lambda p: -p.pid):
        try:
            os.kill(p.pid, signal.SIGKILL)
        except OSError:
            pass
