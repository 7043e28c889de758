"""The line at a run's start about heavy packages compiled again by every process (testharness.bytecode).

The inner runs are pytest subprocesses, so that PYTHONDONTWRITEBYTECODE is read by Python
itself at start-up, as on a machine that sets it.
"""

from __future__ import annotations

import os
import py_compile
import sys
import types
from pathlib import Path
from unittest import mock

import pytest

from testharness.bytecode import compiled_again


def _package(root: Path, name: str) -> Path:
    init = root / name / "__init__.py"
    init.parent.mkdir(parents=True)
    init.write_text("VALUE = 1\n")
    return init


def test_a_package_without_bytecode_is_named_only_where_python_may_not_write_it(tmp_path, monkeypatch):
    init = _package(tmp_path, "heavy_pkg_a")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert compiled_again(["heavy_pkg_a", "no_such_package_here"], may_write=False) == {"heavy_pkg_a": str(tmp_path)}
    assert compiled_again(["heavy_pkg_a"], may_write=True) == {}  # the first import writes it
    py_compile.compile(str(init), doraise=True)  # as `compileall` or `uv sync --compile-bytecode`
    assert compiled_again(["heavy_pkg_a"], may_write=False) == {}


def test_a_stand_in_module_of_the_project_is_passed_over(monkeypatch):
    monkeypatch.setitem(sys.modules, "heavy_pkg_mock", mock.MagicMock())  # its __spec__ is a mock too
    monkeypatch.setitem(sys.modules, "heavy_pkg_plain", types.ModuleType("heavy_pkg_plain"))  # __spec__ None
    assert compiled_again(["heavy_pkg_mock", "heavy_pkg_plain"], may_write=False) == {}


PROJECT = '[tool.testharness]\nresults_dir = "out"\ntest_roots = ["tests"]\n'
LINE = "sympy have no cached bytecode and PYTHONDONTWRITEBYTECODE (or -B) is set"


@pytest.mark.parametrize(
    ("configured", "dont_write", "expected"),
    [(True, True, True), (True, False, False), (False, True, False)],
    ids=["configured-no-writing", "configured-writing", "merely-installed"],
)
def test_the_run_says_which_packages_every_process_compiles(pytester, monkeypatch, configured, dont_write, expected):
    fake = pytester.path / "site"
    _package(fake, "sympy")  # found first on sys.path, never imported by the run
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(fake), os.environ.get("PYTHONPATH", "")]))
    if dont_write:
        monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", "1")
    else:
        monkeypatch.delenv("PYTHONDONTWRITEBYTECODE", raising=False)
    pytester.makepyprojecttoml(PROJECT if configured else '[project]\nname = "x"\nversion = "0"\n')
    pytester.makepyfile(test_one="def test_one():\n    assert True\n")
    result = pytester.runpytest_subprocess("-q", "-p", "no:cacheprovider", "-p", "no:randomly")  # -q hides a header
    assert result.ret == 0
    shown = [line for line in result.outlines if LINE in line]
    assert bool(shown) == expected, result.outlines[:12]
    if expected:
        assert f"python -m compileall -q -j 0 {fake}`" in shown[0]  # where the package was found
