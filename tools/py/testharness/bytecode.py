"""One line at the run's start when the heavy packages have no cached bytecode and Python may not write it.

A run starts many Python processes (xdist workers, Ray workers, example scripts), and each
imports torch and transformers. Python caches their compiled modules in `__pycache__` on the
first import, unless PYTHONDONTWRITEBYTECODE (or -B) forbids it, as many container images set
it, or their folder is not writable: then every process compiles them again. On a 16-core
GPU machine whose image shipped torch and sympy without .pyc files, a one-line edit inside a
policy actor took 33.1 s to its tests' result instead of 23.8 s (docs/benchmarks.md).
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


def compiled_again(packages: Iterable[str], may_write: bool) -> dict[str, str]:
    """The packages whose `__init__` has no cached bytecode that Python could reuse or write,
    with the folder each was found in (on sys.path; none is imported): without a .pyc for this
    interpreter, and either writing is off (`may_write` False) or their folder is not writable."""
    again = {}
    for name in packages:
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            continue
        origin = getattr(spec, "origin", None)  # a project's stand-in module may have any spec
        if not isinstance(origin, str) or not origin.endswith(".py"):
            continue
        if os.path.exists(importlib.util.cache_from_source(origin)):
            continue
        package_dir = os.path.dirname(origin)
        if not may_write or not os.access(package_dir, os.W_OK):
            again[name] = os.path.dirname(package_dir)
    return again


def advice(again: dict[str, str], may_write: bool) -> str:
    if may_write:  # folders Python cannot write into: a cache elsewhere
        why, fix = "their folders are not writable", "set PYTHONPYCACHEPREFIX to a writable folder"
    else:
        folders = " ".join(sorted(set(again.values())))
        why = "PYTHONDONTWRITEBYTECODE (or -B) is set"
        fix = f"`python -m compileall -q -j 0 {folders}`, or --compile-bytecode on your `uv sync` line"
    return (
        f"testharness: warning: {', '.join(again)} have no cached bytecode and {why}: every Python "
        f"process of the run (xdist and Ray workers, scripts) compiles them again. Once: {fix}"
    )


@pytest.hookimpl(trylast=True)
def pytest_sessionstart(session: pytest.Session) -> None:
    """Written with the run's first lines, -q included (a header line would be hidden)."""
    config = session.config
    if is_xdist_worker(config) or not settings_of(config).configured:
        return
    may_write = not sys.dont_write_bytecode
    again = compiled_again(HEAVY_PACKAGES, may_write)
    if not again:
        return
    line = advice(again, may_write)
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_line(line)
    else:
        print(line, file=sys.stderr)
