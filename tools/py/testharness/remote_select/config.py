"""`[tool.testharness]` keys read by remote-aware selection (pure, no pytest).

Keys (all optional):
  source_packages = ["nemo_rl"]   top-level packages whose files form the import graph;
                                  empty or absent -> the feature is inert (one warning line)
  source_roots    = ["."]         directories (repo-relative) that hold those packages
  test_roots      = ["tests/unit"] where test files live; absent -> pytest's `testpaths`,
                                  else the repo root
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

CONFIG_TABLE = "tool.testharness"


class ConfigError(ValueError):
    """A `[tool.testharness]` value has the wrong shape; the message is one line."""


@dataclass(frozen=True)
class SelectConfig:
    source_packages: tuple[str, ...] = ()
    source_roots: tuple[str, ...] = ("",)  # repo-relative POSIX prefixes, "" = repo root
    test_roots: tuple[str, ...] = ("",)
    test_patterns: tuple[str, ...] = ("test_*.py", "*_test.py")

    def fingerprint(self) -> str:
        """Stable text that changes when a key that shapes the graph changes."""
        return "|".join(
            ",".join(part)
            for part in (self.source_packages, self.source_roots, self.test_roots, self.test_patterns)
        )


def _norm_rel(value: str, key: str) -> str:
    """Repo-relative POSIX prefix ("" for the root); absolute or escaping paths are refused."""
    text = value.replace("\\", "/").strip()
    path = PurePosixPath(text)
    if path.is_absolute() or ".." in path.parts:
        raise ConfigError(f"[{CONFIG_TABLE}] {key}: {value!r} must be a path inside the repository")
    norm = str(path)
    return "" if norm in ("", ".") else norm


def _str_list(table: dict[str, object], key: str) -> list[str] | None:
    if key not in table:
        return None
    value = table[key]
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigError(f"[{CONFIG_TABLE}] {key} must be a list of strings, got {value!r}")
    return list(value)


def load_config(
    root: Path,
    testpaths: list[str] | None = None,
    test_patterns: list[str] | None = None,
) -> SelectConfig:
    """Read `[tool.testharness]` from `root/pyproject.toml`; missing file/table -> defaults.

    `testpaths` (pytest's ini value) is the fallback for `test_roots`; `test_patterns` is
    pytest's `python_files`. Raises ConfigError (one-line message) on malformed input.
    """
    table: dict[str, object] = {}
    pyproject = root / "pyproject.toml"
    if pyproject.is_file():
        try:
            data = tomllib.loads(pyproject.read_text(encoding="utf-8"))
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
            raise ConfigError(f"{pyproject.name}: cannot parse: {exc}") from None
        raw = data.get("tool", {}).get("testharness", {})
        if not isinstance(raw, dict):
            raise ConfigError(f"[{CONFIG_TABLE}] must be a table")
        table = raw

    packages = _str_list(table, "source_packages") or []
    for name in packages:
        if not name.isidentifier():
            raise ConfigError(f"[{CONFIG_TABLE}] source_packages: {name!r} is not a top-level package name")
    roots = _str_list(table, "source_roots") or ["."]
    tests = _str_list(table, "test_roots")
    if tests is None:
        tests = list(testpaths) if testpaths else ["."]
    patterns = tuple(test_patterns) if test_patterns else ("test_*.py", "*_test.py")
    return SelectConfig(
        source_packages=tuple(dict.fromkeys(packages)),
        source_roots=tuple(dict.fromkeys(_norm_rel(r, "source_roots") for r in roots)),
        test_roots=tuple(dict.fromkeys(_norm_rel(t, "test_roots") for t in tests)),
        test_patterns=patterns,
    )
