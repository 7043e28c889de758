"""The pytest plugins an inner run of the harness's own tests loads: the harness's and the
ones it is built on, not whatever else the environment holds.

A shared GPU machine's environment carries plugins this project never declared (on the
H200 machine: hypothesis, jaxtyping, anyio, pytest-mock, pytest-benchmark). pytest loads
every installed `pytest11` entry point in every process, so each of the suite's hundreds of
inner pytests imported them (and, with PYTHONDONTWRITEBYTECODE set, re-rewrote their asserts
with no cache): measured there, about 1 s more per inner pytest than on the CPU box. They
also could change what the inner runs print or do. `-p no:NAME` blocks them by name and
leaves pytest's autoloading of the others exactly as a user's run has it.
"""

from __future__ import annotations

from collections.abc import Iterable
from importlib import metadata

from packaging.utils import canonicalize_name

# Distributions whose plugins inner runs keep: the harness and what it builds on or documents.
HARNESS_PLUGIN_DISTS = frozenset(
    {"testharness", "pytest-testmon", "pytest-xdist", "pytest-rerunfailures", "pytest-cov", "pytest-timeout"}
)


def foreign_plugins(installed: Iterable[tuple[str, str]], keep: Iterable[str] = HARNESS_PLUGIN_DISTS) -> list[str]:
    """Entry-point names of the `(name, distribution)` plugins not from a `keep` distribution."""
    kept = {canonicalize_name(d) for d in keep}
    return sorted({name for name, dist in installed if canonicalize_name(dist) not in kept})


def installed_plugins(path: list[str] | None = None) -> list[tuple[str, str]]:
    """The `pytest11` entry points on `path` (default sys.path), as (name, distribution)."""
    found = []
    for dist in metadata.distributions(**({"path": path} if path is not None else {})):
        for ep in dist.entry_points:
            if ep.group == "pytest11":
                found.append((ep.name, dist.metadata["Name"]))
    return found


def blocking_addopts(plugins: Iterable[str], current: str = "") -> str:
    """PYTEST_ADDOPTS that adds `-p no:NAME` for each plugin to `current`."""
    return " ".join([current.strip(), *(f"-p no:{name}" for name in plugins)]).strip()
