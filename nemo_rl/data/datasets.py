"""JSONL data sets: chat conversations for SFT, problems with answers for GRPO."""

from __future__ import annotations

import json
import random
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, TypedDict


class Message(TypedDict):
    role: str
    content: str


class MathProblem(TypedDict):
    problem: str
    answer: str


def read_jsonl(path: str | Path) -> list[dict[str, Any]]:
    """Every line of `path` as a dict; a bad line is an error naming the file and line."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(
            f"data file not found: {path} (run `uv run tests/unit/prepare_unit_test_assets.py` for the test assets)"
        )
    rows = []
    for lineno, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            raise ValueError(f"{path}:{lineno}: not JSON ({e.msg})") from None
        if not isinstance(row, dict):
            raise ValueError(f"{path}:{lineno}: expected a JSON object")
        rows.append(row)
    return rows


def load_chat_dataset(path: str | Path) -> list[list[Message]]:
    """Conversations from `{"messages": [{"role": ..., "content": ...}, ...]}` lines."""
    convs = []
    for i, row in enumerate(read_jsonl(path), 1):
        msgs = row.get("messages")
        if not isinstance(msgs, list) or not all(isinstance(m, dict) and "role" in m and "content" in m for m in msgs):
            raise ValueError(f"{path}: record {i} has no valid 'messages' list")
        convs.append([Message(role=str(m["role"]), content=str(m["content"])) for m in msgs])
    return convs


def load_math_dataset(path: str | Path) -> list[MathProblem]:
    """Problems from `{"problem": ..., "answer": ...}` lines."""
    out = []
    for i, row in enumerate(read_jsonl(path), 1):
        if "problem" not in row or "answer" not in row:
            raise ValueError(f"{path}: record {i} needs 'problem' and 'answer'")
        out.append(MathProblem(problem=str(row["problem"]), answer=str(row["answer"])))
    return out


def batches(items: Sequence[Any], batch_size: int, seed: int, shuffle: bool = True) -> Iterator[list[Any]]:
    """Endless full batches, reshuffled each epoch with a seeded RNG (resumable by epoch/seed)."""
    if batch_size > len(items):
        raise ValueError(f"batch size {batch_size} exceeds the data set size {len(items)}")
    epoch = 0
    while True:
        order = list(range(len(items)))
        if shuffle:
            random.Random(seed + epoch).shuffle(order)
        for start in range(0, len(order) - batch_size + 1, batch_size):
            yield [items[i] for i in order[start : start + batch_size]]
        epoch += 1
