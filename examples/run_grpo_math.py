"""GRPO on math problems from the command line.

    uv run examples/run_grpo_math.py [--config examples/configs/grpo_math.yaml] [key=value ...]

e.g. `uv run examples/run_grpo_math.py grpo.max_num_steps=3 policy.init_from_sft=results/sft/checkpoints`.
"""

from __future__ import annotations

import sys

from _cli import run_example

from nemo_rl.algorithms.grpo import default_config_path, grpo_train


def main(argv: list[str] | None = None) -> int:
    return run_example("GRPO on math with nemo_rl", default_config_path(), grpo_train, argv)


if __name__ == "__main__":
    sys.exit(main())
