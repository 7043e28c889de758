"""Supervised fine-tuning from the command line.

    uv run examples/run_sft.py [--config examples/configs/sft.yaml] [key=value ...]

e.g. `uv run examples/run_sft.py sft.max_num_steps=20 policy.optimizer.lr=1e-3`.
"""

from __future__ import annotations

import sys

from _cli import run_example

from nemo_rl.algorithms.sft import default_config_path, sft_train


def main(argv: list[str] | None = None) -> int:
    return run_example("SFT with nemo_rl", default_config_path(), sft_train, argv)


if __name__ == "__main__":
    sys.exit(main())
