"""PYTEST_ADDOPTS that blocks the pytest plugins this environment has and uv.lock does not:
what a run in `uv sync`'s environment never loads (bench/gpu_loop.sh, on a GPU machine whose
image carries plugins of its own: hypothesis, jaxtyping, pytest-mock, pytest-benchmark on the
H200, about 1.7 s more per pytest process there).

    export PYTEST_ADDOPTS="$(python3 bench/lock_plugins.py)"     # prints the blocked names on stderr
"""

from __future__ import annotations

import os
import sys
import tomllib
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _bench_common import ROOT  # noqa: E402

sys.path.insert(0, str(ROOT / "tools" / "py" / "tests"))
from inner_plugins import blocking_addopts, foreign_plugins, installed_plugins  # noqa: E402


def locked_distributions(lock: Path = ROOT / "uv.lock") -> set[str]:
    """Every package name uv.lock resolves (all groups and extras)."""
    return {pkg["name"] for pkg in tomllib.loads(lock.read_text(encoding="utf-8")).get("package", [])}


def main() -> int:
    blocked = foreign_plugins(installed_plugins(), keep=locked_distributions())
    print(f"lock_plugins: blocking {', '.join(blocked) or 'none'} (not in uv.lock)", file=sys.stderr)
    print(blocking_addopts(blocked, os.environ.get("PYTEST_ADDOPTS", "")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
