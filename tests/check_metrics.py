#!/usr/bin/env -S uv run
"""Metric checks over a metrics JSON (entry point into tools/py: testharness.checks).

    uv run tests/check_metrics.py METRICS.json 'data["train/loss"]["9"] < 1500' [...] [--table-width N] [--json OUT]

The same command as `testharness check-metrics`; `--help` lists the functions a check may
call. Exit 0 every check passed, 1 one failed, 2 bad input. Importable too, with tests/ on
sys.path:
    from check_metrics import evaluate_check, min, max, mean, median, ratio_above
"""

import sys
from pathlib import Path

try:
    import testharness.checks  # noqa: F401
except ImportError:
    # tools/py not installed (plain python, no uv): use the checkout's copy.
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tools" / "py"))

from testharness.checks import *  # noqa: E402,F403  (the package's __all__)
from testharness.checks.cli import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
