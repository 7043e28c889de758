"""Coverage for the processes a measured process starts (its Ray workers among them).

The library calls it where it starts a Ray job (`ray_cluster.job_runtime_env`: the job's workers
get the variable); a test session that starts other Python processes may hand it to them too
(tests/unit/conftest.py under `--cov`). Importing this changes nothing.
"""

from __future__ import annotations

import copy
import os
import sys


def child_coverage_env() -> dict[str, str]:
    """When coverage measures this process (`coverage run`, `pytest --cov`), the variable that
    makes the Python processes it starts (the job's Ray workers) measure themselves too, else {}.

    This is coverage's own `patch = ["subprocess"]` (the config, serialized, in
    COVERAGE_PROCESS_CONFIG, which coverage's .pth file reads at every Python start-up), but
    with parallel mode for the children only: in the config file that patch would make the
    driver parallel too, and `coverage run -a` (upstream's functional scripts) refuses that.
    Each child writes `<data file>.<host>.<pid>.<random>`; `pytest --cov` combines them at the
    end of the session, `coverage combine --append` otherwise. Nothing when a subprocess config
    is already set (this process is such a child; ray_cluster.FORWARDED_ENV passes it on), or when the
    running coverage has no config file (pytest-testmon's own measurement)."""
    if os.environ.get("COVERAGE_PROCESS_CONFIG") or os.environ.get("COVERAGE_PROCESS_START"):
        return {}
    coverage = sys.modules.get("coverage")  # never imported here: only a running one matters
    current = getattr(getattr(coverage, "Coverage", None), "current", None)
    cov = current() if callable(current) else None
    config = getattr(cov, "config", None)
    if config is None or getattr(config, "config_file", None) is None or not hasattr(config, "serialize"):
        return {}  # coverage < 7.10 has no serialize(): children unmeasured
    children = copy.copy(config)
    children.parallel = True
    return {"COVERAGE_PROCESS_CONFIG": children.serialize()}
