"""What remote-aware selection needs from `[tool.testharness]` (the project's Settings).

The keys and their defaults are settings.py's (one loader, one error policy):
  source_packages = ["mypkg"]      top-level packages whose files form the import graph;
                                   empty or absent -> the feature is inert (one warning line)
  source_roots    = ["."]          directories (repo-relative) that hold those packages
  test_roots      = ["tests"]      where test files live (default: pytest's testpaths in
                                   pyproject.toml, else ["tests"])
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from testharness.settings import Settings

DEFAULT_TEST_PATTERNS = ("test_*.py", "*_test.py")  # pytest's python_files default


@dataclass(frozen=True)
class SelectConfig:
    source_packages: tuple[str, ...] = ()
    source_roots: tuple[str, ...] = ("",)  # repo-relative POSIX prefixes, "" = repo root
    test_roots: tuple[str, ...] = ("",)
    test_patterns: tuple[str, ...] = DEFAULT_TEST_PATTERNS

    def fingerprint(self) -> str:
        """Stable text that changes when a key that shapes the graph changes."""
        return "|".join(
            ",".join(part) for part in (self.source_packages, self.source_roots, self.test_roots, self.test_patterns)
        )


def _prefix(path: Path, root: Path) -> str:
    """Repo-relative POSIX prefix of a path settings.py already kept inside the root."""
    rel = path.relative_to(root).as_posix()
    return "" if rel == "." else rel


def select_config(settings: Settings, test_patterns: list[str] | None = None) -> SelectConfig:
    """Selection settings from the project's Settings; `test_patterns` is pytest's `python_files`."""
    root = settings.root
    return SelectConfig(
        source_packages=settings.source_packages,
        source_roots=tuple(_prefix(p, root) for p in settings.source_roots),
        test_roots=tuple(_prefix(p, root) for p in settings.test_roots),
        test_patterns=tuple(test_patterns) if test_patterns else DEFAULT_TEST_PATTERNS,
    )
