"""nemo_rl: a compact Ray-based post-training library."""

import copy
import os
import sys

# Under `uv run`, Ray's uv hook (on by default) starts every worker from a re-packaged copy
# of the checkout, in a virtual environment of its own. Workers here run the driver's
# interpreter and environment instead. Ray reads the switch once, when `ray` is imported,
# so it is set here, before any nemo_rl module imports Ray.
os.environ.setdefault("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")


def _measure_workers_like_the_driver() -> None:
    """When coverage measures this process (`coverage run`, `pytest --cov`), measure the Python
    processes it starts too (Ray's workers: the worker group forwards the variable to them).

    This is coverage's own `patch = ["subprocess"]` (the config, serialized, in
    COVERAGE_PROCESS_CONFIG, which coverage's .pth file reads at every Python start-up), but
    with parallel mode for the children only: in the config file that patch would make the
    driver parallel too, and `coverage run -a` (upstream's functional scripts) refuses that.
    Each child writes `<data file>.<host>.<pid>.<random>`; `pytest --cov` combines them at the
    end of the session, `coverage combine --append` otherwise. Nothing is done when a
    subprocess config is already set (a child, or a project with its own patch), or when the
    running coverage has no config file (pytest-testmon's own measurement)."""
    if os.environ.get("COVERAGE_PROCESS_CONFIG") or os.environ.get("COVERAGE_PROCESS_START"):
        return
    coverage = sys.modules.get("coverage")  # never imported here: only a running one matters
    current = getattr(getattr(coverage, "Coverage", None), "current", None)
    cov = current() if callable(current) else None
    config = getattr(cov, "config", None)
    if config is None or getattr(config, "config_file", None) is None or not hasattr(config, "serialize"):
        return  # coverage < 7.10 has no serialize(): children unmeasured, as before
    children = copy.copy(config)
    children.parallel = True
    os.environ["COVERAGE_PROCESS_CONFIG"] = children.serialize()


_measure_workers_like_the_driver()
