"""Supervised fine-tuning from the command line.

    uv run examples/run_sft.py [--config examples/configs/sft.yaml] [--check-config] [key=value ...]

e.g. `uv run examples/run_sft.py sft.max_num_steps=20 policy.optimizer.lr=1e-3`. Every value
is checked before anything starts (a bad one: one line on stderr, exit 2); a failed run ends
in one line naming the cause (exit 1), Ctrl-C in a clean stop (exit 130): see _cli.py.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING or __package__:  # imported as a module (from examples import run_eval); mypy reads this branch
    from ._cli import run_example
else:  # run as a script (uv run examples/run_eval.py): _cli.py sits beside it
    from _cli import run_example

from nemo_rl.algorithms.config_checks import validate_sft

if TYPE_CHECKING:
    from nemo_rl.algorithms.sft import SFTMasterConfig

DEFAULT_CONFIG = Path(__file__).resolve().parent / "configs" / "sft.yaml"


def train(cfg: SFTMasterConfig) -> dict[str, float]:
    # torch, transformers, Ray: imported only once the config passed its checks
    from nemo_rl.algorithms.sft import sft_train

    return sft_train(cfg)


def main(argv: list[str] | None = None) -> int:
    return run_example("SFT with nemo_rl", DEFAULT_CONFIG, validate_sft, train, argv)


if __name__ == "__main__":
    sys.exit(main())
