"""Metric checks over a metrics JSON (entry point into tools/py: testharness.check_metrics).

    uv run tests/check_metrics.py METRICS.json 'data["train/loss"]["9"] < 1500' [...] [--table-width N] [--json OUT]

Importable too, with tests/ on sys.path:
    from check_metrics import evaluate_check, min, max, mean, median, ratio_above
"""

import sys
from pathlib import Path

try:
    import testharness.check_metrics  # noqa: F401
except ImportError:
    # tools/py not installed (plain python, no uv): use the checkout's copy.
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tools" / "py"))

from testharness.check_metrics import *  # noqa: E402,F403  (the module's __all__)
from testharness.check_metrics import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
