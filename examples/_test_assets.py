"""Build the tiny offline test assets when an example's config points at them and they are missing."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ASSETS = ROOT / "tests" / "unit" / "test_assets"


def ensure_test_assets(paths: list[str]) -> None:
    """If any of `paths` lies in tests/unit/test_assets and does not exist, build the assets."""
    wanted = [Path(p) for p in paths if p and "test_assets" in Path(p).parts]
    if wanted and not all((p if p.is_absolute() else Path.cwd() / p).exists() for p in wanted):
        print("[assets] the tiny test assets are missing: building them (offline, about 10 s)", flush=True)
        subprocess.run([sys.executable, str(ROOT / "tests" / "unit" / "prepare_unit_test_assets.py")], check=True)
