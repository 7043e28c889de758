"""GRPO on math problems from the command line.

    uv run examples/run_grpo_math.py [--config examples/configs/grpo_math.yaml] [--check-config] [key=value ...]

e.g. `uv run examples/run_grpo_math.py grpo.max_num_steps=3 policy.init_from_sft=results/sft/checkpoints`.
Every value is checked before anything starts (a bad one: one line on stderr, exit 2); a
failed run ends in one line naming the cause (exit 1), Ctrl-C in a clean stop (exit 130):
see _cli.py.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING or __package__:  # imported as a module (from examples import run_eval); mypy reads this branch
    from ._cli import run_example
else:  # run as a script (uv run examples/run_eval.py): _cli.py sits beside it
    from _cli import run_example

from nemo_rl.algorithms.config_checks import validate_grpo

if TYPE_CHECKING:
    from nemo_rl.algorithms.grpo import GRPOMasterConfig

DEFAULT_CONFIG = Path(__file__).resolve().parent / "configs" / "grpo_math.yaml"


def train(cfg: GRPOMasterConfig) -> dict[str, float]:
    # torch, transformers, Ray: imported only once the config passed its checks
    from nemo_rl.algorithms.grpo import grpo_train

    return grpo_train(cfg)


def main(argv: list[str] | None = None) -> int:
    return run_example("GRPO on math with nemo_rl", DEFAULT_CONFIG, validate_grpo, train, argv)


if __name__ == "__main__":
    sys.exit(main())
