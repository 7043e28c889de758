"""Evaluate a model and the checkpoints of a training run from the command line.

    uv run examples/run_eval.py [--config examples/configs/eval.yaml] [--check-config] [key=value ...]

e.g. `uv run examples/run_eval.py eval.checkpoint_dir=results/sft/checkpoints`: the base model
(logged at step 0) and every checkpoint step_N of that run (at step N), eval/loss and
eval/accuracy each. Every value is checked before anything starts (a bad one: one line on
stderr, exit 2); a failed run ends in one line naming the cause (exit 1), Ctrl-C in a clean
stop (exit 130): see _cli.py.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING or __package__:  # imported as a module (from examples import run_eval); mypy reads this branch
    from ._cli import run_example
else:  # run as a script (uv run examples/run_eval.py): _cli.py sits beside it
    from _cli import run_example

from nemo_rl.algorithms.config_checks import validate_eval

if TYPE_CHECKING:
    from nemo_rl.algorithms.eval import EvalMasterConfig

DEFAULT_CONFIG = Path(__file__).resolve().parent / "configs" / "eval.yaml"


def evaluate(cfg: EvalMasterConfig) -> dict[str, float]:
    # torch, transformers, Ray: imported only once the config passed its checks
    from nemo_rl.algorithms.eval import run_eval

    return run_eval(cfg)


def main(argv: list[str] | None = None) -> int:
    return run_example(
        "Evaluate a model and a run's checkpoints with nemo_rl", DEFAULT_CONFIG, validate_eval, evaluate, argv
    )


if __name__ == "__main__":
    sys.exit(main())
