"""Rules of the house, checked on the harness's code (docs/harness-map.md):

- the plugins meet through the contract, the harness's own hooks (hookspecs.py) and the cores,
  never by importing each other: walked over the import statements of every module a real
  session registers as a plugin (a module, or the module of a per-config plugin object);
- no module is longer than MAX_LINES: one role each, readable in one sitting."""

from __future__ import annotations

import ast
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

PACKAGE = "testharness"
MAX_LINES = 400


def _plugin_modules(config: pytest.Config) -> set[str]:
    names = set()
    for _, plugin in config.pluginmanager.list_name_plugin():
        name = plugin.__name__ if isinstance(plugin, ModuleType) else type(plugin).__module__
        if name.split(".")[0] == PACKAGE:
            names.add(name)
    return names


def _is_module(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except ModuleNotFoundError:
        return False


def imported_modules(name: str) -> set[str]:
    """The harness modules that module `name` imports anywhere in its source (functions too):
    `import a.b`, `from a import b` (b a module, else a), relative forms resolved."""
    source = Path(sys.modules[name].__file__ or "")
    package = name if source.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(source.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
            for alias in node.names:
                found.add(f"{base}.{alias.name}" if _is_module(f"{base}.{alias.name}") else base)
    return {m for m in found if m.split(".")[0] == PACKAGE}


def test_no_plugin_module_imports_another(pytester: pytest.Pytester) -> None:
    pytester.makepyprojecttoml('[tool.testharness]\nresults_dir = "out"\n')
    config = pytester.parseconfigure("-p", "testharness.plugin", "-p", "no:cacheprovider")
    plugins = _plugin_modules(config)
    # The walk sees the plugins: the entry point's list, the parallel package's two roles, and
    # the results recorder (a per-config plugin object).
    assert {
        "testharness.plugin",
        "testharness.interrupts",
        "testharness.parallel.controller",
        "testharness.parallel.worker",
        "testharness.recorder",
        "testharness.hygiene.plugin",
        "testharness.supervised",
    } <= plugins, plugins
    sideways = {name: sorted(imported_modules(name) & (plugins - {name})) for name in sorted(plugins)}
    assert {name: found for name, found in sideways.items() if found} == {}


def test_the_walk_sees_both_import_forms() -> None:
    # The walk itself: parallel's package names its roles' module by an absolute import, the
    # remote-select plugin imports its cores relatively.
    assert "testharness.parallel.handover" in imported_modules("testharness.parallel")
    assert {"testharness.remote_select.engine", "testharness.contract"} <= imported_modules(
        "testharness.remote_select.plugin"
    )


def test_no_harness_module_is_over_the_limit() -> None:
    package = Path(importlib.util.find_spec(PACKAGE).origin or "").parent  # type: ignore[union-attr]
    lengths = {
        str(path.relative_to(package)): len(path.read_text(encoding="utf-8").splitlines())
        for path in package.rglob("*.py")
    }
    assert len(lengths) > 50  # the whole package was walked
    assert {name: n for name, n in lengths.items() if n > MAX_LINES} == {}
