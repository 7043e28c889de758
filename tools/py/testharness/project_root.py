"""Which project a harness command runs in: the nearest directory holding a pyproject.toml with
`[tool.testharness]` (pure: no pytest, no Ray). The command line tools start here (report,
state, port-check, functional); the table's values are `settings.load_settings`' business.
"""

from __future__ import annotations

import tomllib
from pathlib import Path


def _has_table(pyproject: Path) -> bool:
    """A cheap look for the table; False when the file cannot be read (load_settings reports that)."""
    try:
        tool = tomllib.loads(pyproject.read_text(encoding="utf-8")).get("tool", {})
    except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError):
        return False
    return isinstance(tool, dict) and "testharness" in tool


def find_project_root(start: Path) -> Path:
    """The nearest directory at or above `start` holding a pyproject.toml with [tool.testharness].

    Falls back to the nearest one with any pyproject.toml, then to `start` itself, so the
    command works from a sub-directory of the project as well as from its root. Only the
    table's presence is looked at here; its values are load_settings' business.
    """
    start = start.resolve()
    any_pyproject: Path | None = None
    for directory in (start, *start.parents):
        pyproject = directory / "pyproject.toml"
        if not pyproject.is_file():
            continue
        if any_pyproject is None:
            any_pyproject = directory
        if _has_table(pyproject):
            return directory
    return any_pyproject or start
