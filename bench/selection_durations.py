"""pytest plugin used by bench/selection.py: writes {nodeid: [outcome, seconds]} to $SELECTION_BENCH_OUT.

Under `-n`, the controller writes it: xdist hands it every worker's reports."""

from __future__ import annotations

import json
import os

import pytest

_results: dict[str, list[object]] = {}


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    entry = _results.setdefault(report.nodeid, ["passed", 0.0])
    if report.when == "setup":
        entry[0], entry[1] = "passed", 0.0
    entry[1] = float(entry[1]) + report.duration  # type: ignore[arg-type]
    if report.failed:
        entry[0] = "failed"
    elif report.skipped and entry[0] == "passed":
        entry[0] = "skipped"


def pytest_sessionfinish(session: pytest.Session) -> None:
    out = os.environ.get("SELECTION_BENCH_OUT")
    if out and not hasattr(session.config, "workerinput"):  # not an xdist worker
        with open(out, "w", encoding="utf-8") as fh:
            json.dump(_results, fh)
