"""What the example entry points share: config loading with overrides, and the test assets."""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable

from nemo_rl.config import ConfigError, load_config

ROOT = Path(__file__).resolve().parents[1]


def ensure_test_assets(paths: list[str]) -> None:
    """If any of `paths` lies in tests/unit/test_assets and does not exist, build the assets."""
    wanted = [Path(p) for p in paths if p and "test_assets" in Path(p).parts]
    if wanted and not all((p if p.is_absolute() else Path.cwd() / p).exists() for p in wanted):
        print("[assets] the tiny test assets are missing: building them (offline, about 10 s)", flush=True)
        subprocess.run([sys.executable, str(ROOT / "tests" / "unit" / "prepare_unit_test_assets.py")], check=True)


def run_example(description: str, default_config: Path, train: Callable[[Any], object], argv: list[str] | None) -> int:
    """`PROG [--config FILE] [key=value ...]`: load, check, build missing assets, train. Exit status."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--config", type=Path, default=default_config)
    parser.add_argument("overrides", nargs="*", help="dotted key=value overrides")
    args = parser.parse_args(argv)
    try:
        cfg = load_config(args.config, args.overrides)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    ensure_test_assets([cfg["policy"]["model_name"], cfg["data"]["train_path"], cfg["data"]["val_path"]])
    train(cfg)
    return 0
