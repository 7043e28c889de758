"""The pure part of test hygiene (no pytest, no Ray): snapshots, leaks, stacks, reasons.

A `Snapshot` is what one process can see at one moment: the live Ray actors and placement
groups of its Ray job, its own running descendant processes (Ray's processes left out), and
the memory in use on every GPU it can read. Leaks are differences between two snapshots
(`leaks_between`) or resources a broader-scoped fixture created and still holds after its
finalizer ran (`still_held`). Hang diagnosis turns py-spy's JSON dumps into `Stack`s and
names the frame where an actor method is stuck (`stuck_frame`, `hang_reason`).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

LEAK_KINDS = ("actor", "placement_group", "process", "gpu_memory")


@dataclass(frozen=True)
class Actor:
    id: str
    class_name: str
    pid: int = 0
    node_id: str = ""
    name: str = ""  # a named actor's name
    namespace: str = ""
    detached: bool = False
    state: str = "ALIVE"


@dataclass(frozen=True)
class Group:
    """A Ray placement group (not yet removed)."""

    id: str
    name: str = ""
    strategy: str = ""
    bundles: int = 0
    state: str = "CREATED"


@dataclass(frozen=True)
class Proc:
    pid: int
    start: float  # start time (clock ticks since boot): with the pid, it names one process
    title: str = ""


@dataclass(frozen=True)
class Snapshot:
    actors: Mapping[str, Actor] = field(default_factory=dict)
    groups: Mapping[str, Group] = field(default_factory=dict)
    procs: Mapping[tuple[int, float], Proc] = field(default_factory=dict)
    gpus: Mapping[str, float] = field(default_factory=dict)  # "<node>:<index>" -> MiB in use
    ray: bool = False  # whether actors and groups were read (Ray connected in this process)

    def without(self, owned: Snapshot) -> Snapshot:
        """This snapshot less the resources in `owned` (held by a live broader fixture)."""
        return created_between(owned, self)


def created_between(before: Snapshot, after: Snapshot) -> Snapshot:
    """What exists in `after` and not in `before` (GPU readings: `after`'s)."""
    return Snapshot(
        actors={k: v for k, v in after.actors.items() if k not in before.actors},
        groups={k: v for k, v in after.groups.items() if k not in before.groups},
        procs={k: v for k, v in after.procs.items() if k not in before.procs},
        gpus=after.gpus,
        ray=after.ray,
    )


@dataclass(frozen=True)
class Leak:
    """One thing a test (or a broader fixture, `owner`) left behind."""

    kind: str  # one of LEAK_KINDS
    what: str  # actor class, placement group name, process title, GPU
    detail: str  # ids, pid, node, MiB
    owner: str = ""  # "" for the test itself, else e.g. "module fixture 'policy'"

    def line(self) -> str:
        kind = self.kind.replace("_", " ")
        by = f" [{self.owner}]" if self.owner else ""
        return f"{kind} {self.what} ({self.detail}){by}"

    def as_json(self) -> dict[str, str]:
        out = {"kind": self.kind, "what": self.what, "detail": self.detail}
        if self.owner:
            out["owner"] = self.owner
        return out

    @classmethod
    def from_json(cls, data: Any) -> Leak | None:
        """The record written by as_json, or None for anything else (one bad entry is skipped)."""
        if not isinstance(data, dict):
            return None
        values = [data.get(k) for k in ("kind", "what", "detail")]
        if not all(isinstance(v, str) for v in values):
            return None
        owner = data.get("owner", "")
        return cls(str(values[0]), str(values[1]), str(values[2]), owner if isinstance(owner, str) else "")


def _actor_leak(a: Actor, owner: str) -> Leak:
    parts = [f"id {a.id[:12]}"]
    if a.name:
        parts.append(f"named {a.name!r}" + (f" in namespace {a.namespace!r}" if a.namespace else ""))
    if a.detached:
        parts.append("detached")
    if a.pid:
        parts.append(f"pid {a.pid}")
    if a.state != "ALIVE":
        parts.append(a.state.lower())
    return Leak("actor", a.class_name or "<unknown class>", ", ".join(parts), owner)


def _group_leak(g: Group, owner: str) -> Leak:
    detail = f"id {g.id[:12]}, {g.bundles} bundle(s) {g.strategy}".rstrip()
    return Leak("placement_group", repr(g.name) if g.name else "<unnamed>", detail, owner)


def _proc_leak(p: Proc, owner: str) -> Leak:
    return Leak("process", p.title[:80] or "<unknown>", f"pid {p.pid}", owner)


def resource_leaks(left: Snapshot, owner: str = "") -> list[Leak]:
    """Each actor, placement group and process of `left` as a leak."""
    leaks = [_actor_leak(a, owner) for a in sorted(left.actors.values(), key=lambda a: (a.class_name, a.id))]
    leaks += [_group_leak(g, owner) for g in sorted(left.groups.values(), key=lambda g: (g.name, g.id))]
    leaks += [_proc_leak(p, owner) for p in sorted(left.procs.values(), key=lambda p: p.pid)]
    return leaks


def leaks_between(before: Snapshot, after: Snapshot, owned: Snapshot | None = None) -> list[Leak]:
    """What a test created and did not end: in `after`, not in `before`, not held by a live
    broader fixture (`owned`). Actors and groups count when `after` read Ray (a `before`
    without Ray had none: this process's Ray job did not exist yet)."""
    left = created_between(before, after)
    if owned is not None:
        left = left.without(owned)
    if not after.ray:
        left = Snapshot(procs=left.procs)
    return resource_leaks(left)


def still_held(owned: Snapshot, now: Snapshot, owner: str) -> list[Leak]:
    """Resources a fixture created that are still there after its finalizer ran."""
    left = Snapshot(
        actors={k: v for k, v in now.actors.items() if k in owned.actors} if now.ray else {},
        groups={k: v for k, v in now.groups.items() if k in owned.groups} if now.ray else {},
        procs={k: v for k, v in now.procs.items() if k in owned.procs},
    )
    return resource_leaks(left, owner)


def gpu_growth(
    before: Mapping[str, float], after: Mapping[str, float], threshold_mib: float, owner: str = ""
) -> list[Leak]:
    """GPUs whose memory in use grew by more than `threshold_mib` (GPUs read both times)."""
    leaks = []
    for gpu in sorted(set(before) & set(after)):
        grew = after[gpu] - before[gpu]
        if grew > threshold_mib:
            detail = f"+{grew:.0f} MiB ({before[gpu]:.0f} -> {after[gpu]:.0f}), threshold {threshold_mib:g} MiB"
            leaks.append(Leak("gpu_memory", f"GPU {gpu}", detail, owner))
    return leaks


def add_gpus(base: Mapping[str, float], grown: Mapping[str, float]) -> dict[str, float]:
    """`base` plus `grown` per GPU (the level a test may end at when a fixture took memory)."""
    return {gpu: value + grown.get(gpu, 0.0) for gpu, value in base.items()}


def gpu_delta(before: Mapping[str, float], after: Mapping[str, float]) -> dict[str, float]:
    return {gpu: after[gpu] - before[gpu] for gpu in set(before) & set(after)}


def failure_line(leaks: list[Leak], limit: int = 3) -> str:
    """The one-line error of --fail-on-leak."""
    shown = "; ".join(leak.line() for leak in leaks[:limit])
    more = f"; and {len(leaks) - limit} more" if len(leaks) > limit else ""
    return f"leaked {len(leaks)} resource(s) after teardown: {shown}{more}"


def summary_lines(leaks_by_test: Mapping[str, list[Leak]]) -> list[str]:
    """The end-of-run block: one line per test, its leaks indented below."""
    lines = []
    for nodeid in sorted(leaks_by_test):
        leaks = leaks_by_test[nodeid]
        if not leaks:
            continue
        lines.append(f"{nodeid}: {len(leaks)} leak(s)")
        lines.extend(f"    {leak.line()}" for leak in leaks)
    return lines


# --------------------------------------------------------------------------- stacks


@dataclass(frozen=True)
class Frame:
    function: str
    file: str
    line: int

    def where(self) -> str:
        return f"{self.file}:{self.line}"


@dataclass(frozen=True)
class Thread:
    name: str
    frames: tuple[Frame, ...]  # innermost first, as py-spy and faulthandler print them


@dataclass(frozen=True)
class Stack:
    """The stacks of one process (`error` says why there are none)."""

    label: str  # e.g. "actor Sleeper (pid 123)" or "test process (pid 45)"
    pid: int
    threads: tuple[Thread, ...] = ()
    error: str = ""
    actor_class: str = ""

    def text(self) -> str:
        head = f"--- {self.label}"
        if self.error:
            return f"{head}: no stack ({self.error})"
        out = [head]
        for t in self.threads:
            out.append(f'  Thread "{t.name}"')
            out.extend(f"    {f.function} ({f.where()})" for f in t.frames)
        return "\n".join(out)

    def as_json(self) -> dict[str, Any]:
        return {"process": self.label, "pid": self.pid, "error": self.error, "stack": self.text()}


def short_path(filename: str, root: str) -> str:
    """A frame's file as a person reads it: relative to the project root, or from the
    installed package on (`site-packages/torch/x.py` -> `torch/x.py`)."""
    if root and filename.startswith(root.rstrip("/") + "/"):
        return filename[len(root.rstrip("/")) + 1 :]
    for marker in ("/site-packages/", "/dist-packages/"):
        if marker in filename:
            return filename.split(marker, 1)[1]
    return filename


def parse_pyspy_json(text: str, root: str = "") -> tuple[Thread, ...]:
    """Threads from `py-spy dump --json` output; ValueError when it is not that."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"py-spy printed no JSON ({exc.msg})") from None
    if not isinstance(data, list):
        raise ValueError("py-spy JSON is not a list of threads")
    threads = []
    for entry in data:
        if not isinstance(entry, dict):
            continue
        frames = tuple(
            Frame(str(f.get("name", "?")), short_path(str(f.get("filename", "?")), root), int(f.get("line") or 0))
            for f in entry.get("frames") or []
            if isinstance(f, dict)
        )
        threads.append(Thread(str(entry.get("thread_name") or entry.get("thread_id") or "?"), frames))
    # The main thread first: that is where an actor runs its methods.
    threads.sort(key=lambda t: t.name != "MainThread")
    return tuple(threads)


def frames_of_python(frames: Iterable[tuple[str, str, int]], root: str = "") -> tuple[Frame, ...]:
    """Frames (outermost first, as traceback.extract_stack gives them) -> innermost first."""
    return tuple(Frame(fn, short_path(file, root), line) for fn, file, line in reversed(list(frames)))


def _is_ray_internal(frame: Frame) -> bool:
    f = frame.file
    return f.startswith("ray/") or "/ray/" in f


@dataclass(frozen=True)
class Stuck:
    """Where one process is stuck: the method's frame, and the innermost frame below it."""

    label: str  # "actor Sleeper.nap" or "test process"
    frame: Frame
    innermost: Frame

    def text(self) -> str:
        where = f"{self.label} at {self.frame.where()}"
        if self.innermost != self.frame:
            where += f" (in {self.innermost.function}, {self.innermost.where()})"
        return where


def actor_stuck(stack: Stack) -> Stuck | None:
    """An actor's stuck method: on its main thread, the outermost frame that is not Ray's
    own machinery (main_loop -> actor_method_executor -> *the method*), or None when the
    actor is idle (only Ray frames) or there is no stack."""
    if not stack.threads:
        return None
    main = stack.threads[0]
    if not main.frames:
        return None
    user = [f for f in main.frames if not _is_ray_internal(f)]
    if not user:
        return None
    method = user[-1]  # outermost user frame
    name = method.function  # py-spy prints qualified names: Sleeper.nap, test_x.<locals>.f
    if stack.actor_class:
        label = f"actor {stack.actor_class}.{name.rpartition('.')[2]}"
    else:
        label = f"task {name.replace('.<locals>.', '.')}"
    return Stuck(label, method, main.frames[0])


def driver_stuck(frames: tuple[Frame, ...], test_file: str) -> Stuck | None:
    """The test process's main thread: the innermost frame in the test's own file."""
    if not frames:
        return None
    for frame in frames:
        if frame.file == test_file or (test_file and frame.file.endswith("/" + test_file)):
            return Stuck("test process", frame, frames[0])
    return Stuck("test process", frames[0], frames[0])


def hang_reason(timeout_s: float, stuck: list[Stuck], test: Stuck | None, what: str = "the test") -> str:
    """The failure's one line: the stuck actors first (they are why the test waits)."""
    head = f"Timeout: {what} ran over {timeout_s:g} s"
    if stuck:
        more = f" (+{len(stuck) - 1} more stuck, stacks below)" if len(stuck) > 1 else ""
        return f"{head}; {stuck[0].text()}{more}"
    if test is not None:
        return f"{head}; no Ray actor was busy; {test.text()}"
    return head


def hang_record(timeout_s: float, reason: str, stuck: list[Stuck], stacks: list[Stack]) -> dict[str, Any]:
    """What goes under the test in the results file as `hang`."""
    return {
        "timeout_s": timeout_s,
        "reason": reason,
        "stuck": [{"where": s.label, "file": s.frame.file, "line": s.frame.line} for s in stuck],
        "stacks": [s.as_json() for s in stacks],
    }


def relative_to(path: str, root: Path) -> str:
    try:
        return Path(path).resolve().relative_to(root.resolve()).as_posix()
    except ValueError:
        return path
