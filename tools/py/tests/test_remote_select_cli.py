"""`python -m testharness.remote_select` (remote_select/__main__.py): arguments, help, errors.

What it prints for a seeded project is checked in test_remote_select_core.py
(test_explain_cli_prints_a_closure); here, the command line itself, run as a user runs it.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

import pytest

from testharness.remote_select.__main__ import add_arguments, run

TOOLS_PY = Path(__file__).resolve().parents[3] / "tools" / "py"


def _cli(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TOOLS_PY), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run(
        [sys.executable, "-m", "testharness.remote_select", *args],
        check=False,
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "pyproject.toml").write_text("[tool.testharness]\nsource_packages = ['pkg']\ntest_roots = ['tests']\n")
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "mod.py").write_text("X = 1\n")
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_a.py").write_text("import pkg.mod\n\ndef test_a():\n    pass\n")
    return tmp_path


def test_help_prints_the_usage_and_exits_0(project: Path) -> None:
    proc = _cli(project, "--help")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("usage: python -m testharness.remote_select")
    assert "TEST_FILE" in proc.stdout and "--root" in proc.stdout
    assert not (project / "--help").exists() and proc.stderr == ""


def test_a_test_file_prints_its_closure(project: Path) -> None:
    proc = _cli(project, "tests/test_a.py")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[:2] == ["tests/test_a.py: static closure", "  pkg/__init__.py"]
    assert "  pkg/mod.py" in proc.stdout.splitlines()


@pytest.mark.parametrize(
    ("args", "pyproject", "says"),
    [
        ((), None, "the following arguments are required: TEST_FILE"),
        (("--bogus", "tests/test_a.py"), None, "unrecognized arguments: --bogus"),
        (("tests/nope.py",), None, "tests/nope.py is not a Python file under the test roots"),
        (("tests/test_a.py",), "[tool.testharness]\ntest_roots = ['tests']\n", "source_packages is not set"),
        (("tests/test_a.py",), "[tool.testharness]\nsource_packages = 3\n", "source_packages"),
        (("tests/test_a.py",), "[tool.testharness\n", "pyproject.toml"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(
    project: Path, args: tuple[str, ...], pyproject: str | None, says: str
) -> None:
    if pyproject is not None:
        (project / "pyproject.toml").write_text(pyproject)
    proc = _cli(project, *args)
    assert proc.returncode == 2
    assert len(proc.stderr.splitlines()) == 1, proc.stderr
    assert says in proc.stderr and "Traceback" not in proc.stderr


def test_the_two_halves_serve_another_parser(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """As `testharness explain` uses them: add_arguments on its own (sub)parser, then run."""
    parser = argparse.ArgumentParser(prog="testharness")
    add_arguments(parser.add_subparsers(dest="command").add_parser("explain"))
    args = parser.parse_args(["explain", "--root", str(project), "tests/test_a.py"])
    assert run(args) == 0
    assert "  pkg/mod.py" in capsys.readouterr().out.splitlines()
