"""One line at the run's start when the heavy packages have no cached bytecode and Python may not write it.

A run starts many Python processes (xdist workers, Ray workers, example scripts), and each
imports torch and transformers. Python caches their compiled modules in `__pycache__` on the
first import, unless PYTHONDONTWRITEBYTECODE (or -B) forbids it, as many container images set
it, or their folder is not writable: then every process compiles them again. On a 16-core
GPU machine whose image shipped torch and sympy without .pyc files, a one-line edit inside a
policy actor took 36-43 s to its tests' result instead of 22.5 s (docs/benchmarks.md).
The line names the packages and how to compile them once; nothing else changes.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from collections.abc import Iterable

import pytest

from testharness.contract import is_xdist_worker, settings_of

# Packages that take seconds to compile and that nearly every process of a post-training
# run imports (sympy: through torch's compiler stack and math checks).
HEAVY_PACKAGES = ("torch", "transformers", "ray", "sympy", "numpy")


def compiled_again(packages: Iterable[str], may_write: bool) -> list[str]:
    """The packages whose `__init__` has no cached bytecode that Python could reuse or write:
    found (not imported) on sys.path, without a .pyc for this interpreter, and either writing is
    off (`may_write` False) or their folder is not writable."""
    again = []
    for name in packages:
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            continue
        origin = spec.origin if spec is not None else None
        if not origin or not origin.endswith(".py"):
            continue
        if os.path.exists(importlib.util.cache_from_source(origin)):
            continue
        if not may_write or not os.access(os.path.dirname(origin), os.W_OK):
            again.append(name)
    return again


def advice(names: list[str], may_write: bool) -> str:
    why = "PYTHONDONTWRITEBYTECODE (or -B) is set" if not may_write else "their folders are not writable"
    return (
        f"testharness: warning: {', '.join(names)} have no cached bytecode and {why}: every Python "
        "process of the run (xdist and Ray workers, scripts) compiles them again. Compile them once: "
        "`uv sync --compile-bytecode`, or `python -m compileall -q` on their folders"
    )


@pytest.hookimpl(trylast=True)
def pytest_sessionstart(session: pytest.Session) -> None:
    """Written with the run's first lines, -q included (a header line would be hidden)."""
    config = session.config
    if is_xdist_worker(config) or not settings_of(config).configured:
        return
    may_write = not sys.dont_write_bytecode
    names = compiled_again(HEAVY_PACKAGES, may_write)
    if not names:
        return
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_line(advice(names, may_write))
    else:
        print(advice(names, may_write), file=sys.stderr)
