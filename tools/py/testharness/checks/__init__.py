"""Metric checks: safe expressions over a metrics JSON, e.g. `data["train/loss"]["9"] < 1500`.

`evaluator` is the pure core (`evaluate_check` -> `CheckResult`, never raises), `functions`
what a check may call, `cli` the table, the JSON report and the command line
(`testharness check-metrics`, `tests/check_metrics.py`).
"""

from testharness.checks.evaluator import CheckResult, evaluate_check, run_checks
from testharness.checks.functions import ALLOWED_FUNCTIONS, all_finite, max, mean, median, min, ratio_above

__all__ = [
    "ALLOWED_FUNCTIONS",
    "CheckResult",
    "all_finite",
    "evaluate_check",
    "max",
    "mean",
    "median",
    "min",
    "ratio_above",
    "run_checks",
]
