"""Supervised fine-tuning from the command line.

    uv run examples/run_sft.py [--config examples/configs/sft.yaml] [key=value ...]

e.g. `uv run examples/run_sft.py sft.max_num_steps=20 policy.optimizer.lr=1e-3`.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import cast

from nemo_rl.algorithms.sft import SFTMasterConfig, default_config_path, sft_train
from nemo_rl.config import ConfigError, load_config

from _test_assets import ensure_test_assets


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="SFT with nemo_rl")
    parser.add_argument("--config", type=Path, default=default_config_path())
    parser.add_argument("overrides", nargs="*", help="dotted key=value overrides")
    args = parser.parse_args(argv)
    try:
        cfg = cast(SFTMasterConfig, load_config(args.config, args.overrides))
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    ensure_test_assets([cfg["policy"]["model_name"], cfg["data"]["train_path"], cfg["data"]["val_path"]])
    sft_train(cfg)
    return 0


if __name__ == "__main__":
    sys.exit(main())
