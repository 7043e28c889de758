"""Keep Ray actors for the next run in the same process instead of stopping them.

Starting a policy worker means a new process that imports torch and transformers and makes a
CUDA context: seconds, every time. Several short runs in a row in one process (a test's run
and then its resume) can share them:

    with reuse_workers():
        sft_train(cfg)          # its workers are kept when it shuts its policy down
        sft_train(resume_cfg)   # gets them back (re-initialised), no new process
    # the kept workers stop here

Outside such a block nothing is kept: `keep` says no and the caller stops its actors as usual.
Who keeps what decides what "the same shape" means (its key) and how to give a kept actor a
new run (a policy worker's `reinit`; a stateless scoring actor needs nothing).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterator
from contextlib import contextmanager
from typing import Any

_kept: dict[Hashable, list[tuple[Any, Callable[[], None]]]] | None = None


@contextmanager
def reuse_workers() -> Iterator[None]:
    """Within: actors offered to `keep` are kept for `take`; at the end those left are stopped
    (all of them, then the first error is raised). A nested block belongs to the outer one."""
    global _kept
    if _kept is not None:
        yield
        return
    _kept = {}
    try:
        yield
    finally:
        kept, _kept = _kept, None
        errors = []
        for items in kept.values():
            for _, stop in items:
                try:
                    stop()
                except Exception as exc:  # noqa: BLE001  stop the others first
                    errors.append(exc)
        if errors:
            raise errors[0]


def keep(key: Hashable, item: Any, stop: Callable[[], None]) -> bool:
    """Keep `item` under `key` (stopped with `stop()` if nobody takes it); False, keeping
    nothing, outside a `reuse_workers()` block."""
    if _kept is None:
        return False
    _kept.setdefault(key, []).append((item, stop))
    return True


def take(key: Hashable) -> tuple[Any, Callable[[], None]] | None:
    """A kept item of `key` and how to stop it (the taker now owns both), or None."""
    items = _kept.get(key) if _kept is not None else None
    return items.pop() if items else None
