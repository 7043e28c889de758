"""nemo_rl.distributed.reuse: what the training loops' tests rely on to share their workers
between a run and its resume (no Ray needed: the kept items here are plain objects)."""

import pytest

from nemo_rl.distributed.reuse import keep, reuse_workers, take


def test_nothing_is_kept_outside_a_block() -> None:
    stopped: list[str] = []
    assert keep("k", "a", lambda: stopped.append("a")) is False
    assert take("k") is None and stopped == []


def test_a_kept_item_is_taken_once_and_the_rest_stop_at_the_end() -> None:
    stopped: list[str] = []
    with reuse_workers():
        assert keep("k", "a", lambda: stopped.append("a"))
        assert keep("other", "b", lambda: stopped.append("b"))
        item, stop = take("k") or (None, None)
        assert item == "a" and take("k") is None  # the taker owns it now
        with reuse_workers():  # nested: the outer block keeps and stops
            assert keep("k", "c", lambda: stopped.append("c"))
        assert stopped == []
    assert sorted(stopped) == ["b", "c"]
    assert keep("k", "d", lambda: stopped.append("d")) is False  # the block is closed


def test_every_kept_item_stops_even_when_one_fails() -> None:
    stopped: list[str] = []

    def fail() -> None:
        raise RuntimeError("stop failed")

    with pytest.raises(RuntimeError, match="stop failed"):
        with reuse_workers():
            keep("k", "a", fail)
            keep("k", "b", lambda: stopped.append("b"))
    assert stopped == ["b"]
    assert keep("k", "c", lambda: stopped.append("c")) is False  # closed, though a stop failed
