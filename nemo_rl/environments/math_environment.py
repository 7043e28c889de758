"""Reward environment for math problems: extract the final answer, verify it, score 1 or 0.

Scoring runs in `@ray.remote` actors (several when configured) so a slow symbolic check
never blocks the training driver. Malformed responses score 0; nothing in here raises.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from typing import Any

import ray

from nemo_rl.distributed.reuse import keep, take
from nemo_rl.distributed.worker_group import terminate_actors

# math-verify warns on every call made without its signal-based timeout (we bound input size instead).
logging.getLogger("math_verify").setLevel(logging.ERROR)

_ANSWER_LINE = re.compile(r"(?im)^\s*(?:final\s+)?answer\s*[:=]\s*(.+?)\s*$")


def extract_boxed(text: str) -> str | None:
    """Content of the last `\\boxed{...}` (nested braces allowed), or None."""
    start = text.rfind("\\boxed{")
    if start < 0:
        return None
    i, depth = start + len("\\boxed{"), 1
    for j in range(i, len(text)):
        if text[j] == "{":
            depth += 1
        elif text[j] == "}":
            depth -= 1
            if depth == 0:
                return text[i:j].strip()
    return None  # unbalanced: treat as no answer


def extract_answer(text: str) -> str | None:
    """The final answer the prompt template asks for: `\\boxed{}` first, else an `Answer:` line."""
    boxed = extract_boxed(text)
    if boxed:
        return boxed
    lines = _ANSWER_LINE.findall(text)
    return lines[-1].rstrip(".") if lines else None


def _as_number(s: str) -> float | None:
    try:
        return float(s.replace(",", "").replace(" ", ""))
    except ValueError:
        return None


def answers_match(predicted: str, reference: str) -> bool:
    """Numerically first (cheap, exact for plain numbers), then symbolically with math-verify."""
    a, b = _as_number(predicted), _as_number(reference)
    if a is not None and b is not None:
        return abs(a - b) <= 1e-6 * max(1.0, abs(b))
    try:
        from math_verify import parse, verify

        # Timeouts use signals, which only work in a main thread: bound the work by size instead.
        if len(predicted) > 200:
            return False
        gold = parse(f"${reference}$", parsing_timeout=None)
        pred = parse(f"${predicted}$", parsing_timeout=None)
        return bool(gold and pred and verify(gold, pred, timeout_seconds=None))
    except Exception:  # noqa: BLE001  any math-verify failure (it raises many types) means "not verified"
        return False


def score_response(response: str, reference: str) -> float:
    answer = extract_answer(response)
    return 1.0 if answer is not None and answers_match(answer, reference) else 0.0


class MathVerifierWorker:
    def score(self, responses: Sequence[str], references: Sequence[str]) -> list[float]:
        return [score_response(r, a) for r, a in zip(responses, references, strict=True)]


class MathEnvironment:
    """Driver-side handle: splits a batch over `num_workers` scoring actors."""

    def __init__(self, num_workers: int = 1) -> None:
        self._key = ("math environment", max(1, num_workers))
        kept = take(self._key)  # inside reuse_workers(): a previous run's actors (they hold no state)
        if kept is not None:
            self.workers: list[Any] = kept[0]
            return
        actor: Any = ray.remote(num_cpus=0)(MathVerifierWorker)
        self.workers = [actor.remote() for _ in range(max(1, num_workers))]

    def score(self, responses: Sequence[str], references: Sequence[str]) -> list[float]:
        if len(responses) != len(references):
            raise ValueError(f"{len(responses)} responses for {len(references)} references")
        n = len(self.workers)
        chunk = -(-len(responses) // n) if responses else 1
        refs = [
            w.score.remote(responses[i : i + chunk], references[i : i + chunk])
            for w, i in zip(self.workers, range(0, len(responses), chunk), strict=False)
        ]
        return [s for part in ray.get(refs) for s in part]

    def shutdown(self) -> None:
        workers, self.workers = self.workers, []
        if workers and keep(self._key, workers, lambda: terminate_actors(workers)):
            return
        terminate_actors(workers)
