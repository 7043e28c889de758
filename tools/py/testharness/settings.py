"""`[tool.testharness]` from the project's pyproject.toml (pure: no pytest, no Ray).

The harness knows nothing of the project it tests; package names and paths come from here.
Every key has a default so a project without the table still works.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from pathlib import Path

DEFAULT_RESULTS_DIR = "tests/unit"
DEFAULT_TEST_ROOTS = ("tests/unit",)
DEFAULT_ASSETS_SCRIPT = "tests/unit/prepare_unit_test_assets.py"
DEFAULT_ASSETS_DIR = "tests/unit/test_assets"
DEFAULT_REMOTE_MAP_FILE = ".testharness_remote_map.json"
DEFAULT_REMOTE_STATE_FILE = ".testharness_remote_state.json"


@dataclass(frozen=True)
class Settings:
    """The harness settings, with paths resolved against the project root."""

    root: Path
    source_packages: tuple[str, ...] = ()
    results_dir: Path = field(default=Path(DEFAULT_RESULTS_DIR))
    test_roots: tuple[Path, ...] = ()
    assets_script: Path = field(default=Path(DEFAULT_ASSETS_SCRIPT))
    assets_dir: Path = field(default=Path(DEFAULT_ASSETS_DIR))
    # remote-aware selection's two files (key: a path relative to the root; resolved here)
    remote_map_file: Path = field(default=Path(DEFAULT_REMOTE_MAP_FILE))
    remote_state_file: Path = field(default=Path(DEFAULT_REMOTE_STATE_FILE))


class SettingsError(ValueError):
    """A malformed [tool.testharness] table (the message is one line for the user)."""


def _str_list(table: dict[str, object], key: str, default: tuple[str, ...]) -> tuple[str, ...]:
    value = table.get(key, list(default))
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise SettingsError(f"[tool.testharness] {key} must be a list of strings, got {value!r}")
    return tuple(value)


def _str(table: dict[str, object], key: str, default: str) -> str:
    value = table.get(key, default)
    if not isinstance(value, str) or not value:
        raise SettingsError(f"[tool.testharness] {key} must be a non-empty string, got {value!r}")
    return value


def load_settings(root: Path) -> Settings:
    """Read `root/pyproject.toml`'s [tool.testharness]; defaults when the file or table is absent."""
    table: dict[str, object] = {}
    pyproject = root / "pyproject.toml"
    if pyproject.is_file():
        try:
            data = tomllib.loads(pyproject.read_text(encoding="utf-8"))
        except tomllib.TOMLDecodeError as exc:
            raise SettingsError(f"{pyproject}: not valid TOML ({exc})") from None
        tool = data.get("tool", {})
        raw = tool.get("testharness", {}) if isinstance(tool, dict) else {}
        if not isinstance(raw, dict):
            raise SettingsError(f"{pyproject}: [tool.testharness] must be a table")
        table = raw
    return Settings(
        root=root,
        source_packages=_str_list(table, "source_packages", ()),
        results_dir=root / _str(table, "results_dir", DEFAULT_RESULTS_DIR),
        test_roots=tuple(root / p for p in _str_list(table, "test_roots", DEFAULT_TEST_ROOTS)),
        assets_script=root / _str(table, "assets_script", DEFAULT_ASSETS_SCRIPT),
        assets_dir=root / _str(table, "assets_dir", DEFAULT_ASSETS_DIR),
        remote_map_file=root / _str(table, "remote_map_file", DEFAULT_REMOTE_MAP_FILE),
        remote_state_file=root / _str(table, "remote_state_file", DEFAULT_REMOTE_STATE_FILE),
    )


def is_within(path: Path, parent: Path) -> bool:
    """True when `path` is `parent` or below it (both made absolute, symlinks resolved)."""
    try:
        path.resolve().relative_to(parent.resolve())
    except ValueError:
        return False
    return True


def session_in_scope(args: list[str], invocation_dir: Path, test_roots: tuple[Path, ...]) -> bool:
    """Whether a pytest run on `args` concerns a configured test root.

    True when one of the requested paths is inside a test root (`pytest tests/unit/x.py`) or
    contains one (`pytest tests`, or `pytest` alone with testpaths). A pytest run on some
    unrelated directory (e.g. a pytester project in /tmp) is out of scope.
    """
    for arg in args:
        if arg.startswith("-"):
            continue
        path = Path(arg.split("::", 1)[0])
        if not path.is_absolute():
            path = invocation_dir / path
        if any(is_within(path, r) or is_within(r, path) for r in test_roots):
            return True
    return False
