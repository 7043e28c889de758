"""The harness's own tests drive inner pytest runs with the `pytester` fixture.

`pytest_plugins` is only allowed in the root conftest, so the pytester plugin is loaded
here, when this conftest is registered (pytest_configure is a historic hook: it runs for
late conftests too, and pytester's options are then added with their defaults).
"""

import os
import tempfile
from pathlib import Path

import pytest

PYCACHE = Path(tempfile.gettempdir()) / "testharness-pycache"


@pytest.fixture(autouse=True)
def _nested_runs_keep_bytecode(monkeypatch: pytest.MonkeyPatch) -> None:
    """Hundreds of nested pytests (and their Ray workers) start from these tests. Where
    PYTHONDONTWRITEBYTECODE is set, each one compiled again, and pytest rewrote again, every
    module of every pytest plugin (anyio, testmon, the harness...): ~1 s per nested pytest on
    the 2-core box. Here they keep bytecode under one prefix outside the checkout instead, so
    no __pycache__ appears beside the sources. Only for these tests: the library's own
    subprocesses keep the environment's bytecode (installed with uv sync --compile-bytecode)."""
    if os.environ.get("PYTHONDONTWRITEBYTECODE"):
        monkeypatch.delenv("PYTHONDONTWRITEBYTECODE")
        monkeypatch.setenv("PYTHONPYCACHEPREFIX", str(PYCACHE))


def pytest_configure(config: pytest.Config) -> None:
    if not config.pluginmanager.has_plugin("pytester"):
        config.pluginmanager.import_plugin("pytester")
