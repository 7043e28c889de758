"""The controller's `--dist loadfile` scheduler under `-n` (parallel/controller.py installs it whenever it
distributes with loadfile): xdist's LoadFileScheduling, made safe for tests that kill their
worker, and, with recorded durations, handing out each worker's next file itself (`next_file`).

A test that kills its worker (segfault, `os._exit`, SIGKILL) is reported by xdist as failed
("worker 'gwN' crashed while running ..."), once; the rest of its file goes back to the front
of the queue and runs on the next worker that asks, each test once; the crashed test is never
run again. xdist 3.8's own loadfile handles a crash in four ways this one does not:

- it puts the crashed test back with the rest of its file, so every replacement worker runs it
  again and crashes, until --max-worker-restart is used up and the rest of the file never runs;
- it puts the dead worker's finished files back too, handed to a worker as an empty list of
  tests (pytest-xdist#1323);
- it can hand a replacement worker the one test left of a crashed file and nothing else; the
  worker waits for a second test that never comes, and the run hangs (pytest-xdist#1327);
- it gives work to a replacement worker that is still collecting (the dead worker's
  collection still counts as one of the N), which raises KeyError: the run ends in
  INTERNALERROR, or, inside `remove_node`, the crash goes unreported (pytest-xdist#1362).
  Here a worker gets work only once its collection is in; `schedule()` then hands it some.
"""

from __future__ import annotations

import functools
import json
from collections import OrderedDict
from pathlib import Path
from typing import Any

from testharness.shard_plan import default_duration

BUSY_S = 5.0  # a worker with more expected work than this left gets the shortest file next
RUN_FIRST_FILES = "run_first_files.json"  # in the shared dir: the files that hold run_first tests


def next_file(queued: list[str], worker_left_s: float, run_first_files: set[str]) -> str:
    """The file a worker gets next, of `queued` (longest first): the longest, unless the worker
    still has more than BUSY_S of work left; then the shortest, which delays the worker least
    and leaves the long files to the workers that free up first. While a run_first file is
    queued the order is kept: every other test waits for those, so they go out first."""
    if worker_left_s > BUSY_S and not run_first_files.intersection(queued):
        return queued[-1]
    return queued[0]


def requeue_after_crash(
    workload: dict[str, dict[str, bool]], queue: OrderedDict[str, dict[str, bool]]
) -> tuple[str | None, list[str]]:
    """A dead worker's `workload` (file -> test -> done): its crashed test, the first not done
    (marked done: xdist reports it failed, it is never run again), and the files with tests
    still to run, put in front of `queue` (an OrderedDict) in their order. (None, []) when
    the worker had nothing left to run."""
    pending = ((unit, test) for unit in workload.values() for test, done in unit.items() if not done)
    unit, crashed = next(pending, (None, None))
    if unit is None or crashed is None:
        return None, []
    unit[crashed] = True
    rest = [scope for scope, tests in workload.items() if not all(tests.values())]
    for scope in reversed(rest):
        queue[scope] = workload[scope]
        queue.move_to_end(scope, last=False)
    return crashed, rest


@functools.cache
def _classes() -> tuple[type, type]:
    """Built on first use: xdist is imported only in runs that distribute."""
    from xdist.scheduler import LoadFileScheduling  # type: ignore[import-untyped]

    class CrashSafeFileScheduling(LoadFileScheduling):
        """xdist's --dist loadfile, in xdist's order, safe for tests that kill their worker."""

        def remove_node(self, node: Any) -> str | None:
            # Called for a worker that finished (nothing left) or died; KeyError for one that
            # never joined, as xdist expects.
            crashed, rest = requeue_after_crash(self.assigned_work.pop(node), self.workqueue)
            if crashed is not None:
                self.log(f"{node.gateway.id} crashed in {crashed}; back in the queue: {rest}")
                for other in list(self.assigned_work):
                    self._reschedule(other)
            return crashed

        def _reschedule(self, node: Any) -> None:
            super()._reschedule(node)
            # A worker runs the last test it holds only once it gets another or is told to
            # finish (xdist's worker loop). A file put back after a crash can hold one test:
            # handed alone to a worker with nothing else, it would wait there for ever, as no
            # test of that worker ends to ask for more (pytest-xdist#1327). So it gets another
            # file, or, with none queued, is told to finish.
            while (
                not node.shutting_down
                and node in self.registered_collections
                and self._pending_of(self.assigned_work.get(node, {})) == 1
            ):
                super()._reschedule(node)

        def _assign_work_unit(self, node: Any) -> None:
            if node not in self.registered_collections:
                return  # a replacement worker still collecting: schedule() serves it once it has
            self._to_front(node)
            try:
                super()._assign_work_unit(node)  # hands out the front file
            except OSError:
                # The worker died with a report still on its way (a test that crashed it just
                # after another ended): its crash comes next, and remove_node puts this file,
                # assigned to it already, back in the queue.
                pass

        def _to_front(self, node: Any) -> None:
            """Move the file `node` gets next to the front of the queue (xdist's order: as is)."""

    class LongestFirstScheduling(CrashSafeFileScheduling):
        """With recorded durations: `next_file` chooses each worker's next file."""

        def __init__(self, config: Any, log: Any, durations: dict[str, float], shared_dir: Path) -> None:
            super().__init__(config, log)
            self.durations = durations
            self.default_s = default_duration([], durations)
            self.shared_dir = shared_dir

        @functools.cached_property
        def run_first_files(self) -> set[str]:
            # Complete once scheduling starts: every worker writes it before it reports its collection.
            return set(json.loads((self.shared_dir / RUN_FIRST_FILES).read_text()))

        def _reschedule(self, node: Any) -> None:
            if self.workqueue and self._pending_of(self.assigned_work[node]) > 1:
                return  # xdist waits for two left; a worker needs one (the test it holds)
            super()._reschedule(node)

        def _to_front(self, node: Any) -> None:
            units = self.assigned_work.get(node, {}).values()
            left_s = sum(self.durations.get(t, self.default_s) for u in units for t, done in u.items() if not done)
            chosen = next_file(list(self.workqueue), left_s, self.run_first_files)
            self.workqueue.move_to_end(chosen, last=False)

    return CrashSafeFileScheduling, LongestFirstScheduling


def make_scheduler(config: Any, log: Any, durations: dict[str, float] | None, shared_dir: Path) -> Any:
    """The loadfile scheduler of this run: longest first with recorded `durations`, else in
    xdist's order (the workers sort the files: parallel/worker.py)."""
    crash_safe, longest_first = _classes()
    if durations:
        return longest_first(config, log, durations, shared_dir)
    return crash_safe(config, log)
