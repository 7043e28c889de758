"""tests/run_unit.sh flag handling and exit codes, on a tiny project (subprocess)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "run_unit.sh"


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A tiny project that loads the harness like the real repo does (root conftest)."""
    (tmp_path / "pyproject.toml").write_text(
        '[tool.testharness]\nresults_dir = "tests/unit"\ntest_roots = ["tests/unit"]\n'
        '[tool.pytest.ini_options]\nmarkers = ["hf_gated: g", "mcore: m", "run_first: f", '
        '"num_gpus(n): n"]\n'
    )
    (tmp_path / "conftest.py").write_text('pytest_plugins = ["testharness.selection", "testharness.tracker"]\n')
    unit = tmp_path / "tests" / "unit"
    unit.mkdir(parents=True)
    (unit / "test_ok.py").write_text("def test_ok(tracker):\n    tracker.track('v', 1)\n")
    (tmp_path / "failing").mkdir()
    (tmp_path / "failing" / "test_bad.py").write_text("def test_bad():\n    assert False\n")
    (tmp_path / "empty").mkdir()
    return tmp_path


def _run(
    project: Path, *args: str, python: str = sys.executable, extra_env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "TESTHARNESS_"))}
    env.update(
        PYTHON=python,
        TESTHARNESS_ROOT=str(project),
        TESTHARNESS_NO_DISCOVERY="1",  # no Ray probing / asset building in these tests
        **(extra_env or {}),
    )
    return subprocess.run(
        ["bash", str(SCRIPT), *args], cwd=project, env=env, capture_output=True, text=True,
        timeout=120,
    )  # fmt: skip


def test_help(project: Path) -> None:
    proc = _run(project, "--help")
    assert proc.returncode == 0
    assert proc.stdout.startswith("usage: bash tests/run_unit.sh [--rerun-failures N]")


def test_help_lists_the_projects_marker_groups(project: Path) -> None:
    with (project / "pyproject.toml").open("a") as f:
        f.write(
            '[tool.testharness.marker_groups.slow]\noption = "--slow"\n'
            '[tool.testharness.marker_groups.jax]\noption = "--jax-only"\nmode = "only"\n'
            'requires = ["jax"]\nrequires_name = "jax"\nhint = "pip install jax"\n'
        )
    proc = _run(project, "--help")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("usage: bash tests/run_unit.sh [--slow] [--jax-only] [--rerun-failures N]")
    assert "  --slow              also run tests marked slow\n" in proc.stdout
    assert "  --jax-only          run only tests marked jax (needs jax: pip install jax)\n" in proc.stdout


def test_this_repositorys_help_names_its_groups() -> None:
    proc = _run(SCRIPT.parents[1], "--help")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("usage: bash tests/run_unit.sh [--hf-gated] [--mcore-only]")


def test_passing_run_writes_results(project: Path) -> None:
    proc = _run(project)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "--durations=15" in proc.stdout
    assert "run_unit: all selected tests passed" in proc.stdout
    assert (project / "tests" / "unit" / "unit_results.json").is_file()


def test_failure_is_reported_and_non_zero(project: Path) -> None:
    proc = _run(project, "failing")
    assert proc.returncode == 1
    assert "run_unit: FAILED" in proc.stderr


def test_selection_matching_nothing_is_not_a_failure(project: Path) -> None:
    proc = _run(project, "-k", "no_such_test")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "run_unit: no test ran: the selection (markers, -k, --shard) matched none of the" in proc.stdout


def test_no_test_found_is_a_failure(project: Path) -> None:
    proc = _run(project, "empty")
    assert proc.returncode == 5
    assert "no tests collected: no test found" in proc.stderr


@pytest.mark.parametrize("args", [("--rerun-failures", "x"), ("--rerun-failures",), ("--no-such-flag",)])
def test_bad_flags_print_usage_and_exit_2(project: Path, args: tuple[str, ...]) -> None:
    proc = _run(project, *args)
    assert proc.returncode == 2
    assert "usage: bash tests/run_unit.sh" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_rerun_failures_becomes_reruns(project: Path) -> None:
    proc = _run(project, "--rerun-failures", "2", "failing")
    assert proc.returncode == 1
    assert "--reruns 2" in proc.stdout
    assert "2 rerun" in proc.stdout


def test_missing_pytest_or_ray_says_how_to_run_it(project: Path, tmp_path: Path) -> None:
    bare = tmp_path / "bare-python"
    # -S: no site-packages; nor packages put on PYTHONPATH (as on a machine without uv)
    bare.write_text(f'#!/bin/sh\nunset PYTHONPATH\nexec {sys.executable} -S "$@"\n')
    bare.chmod(0o755)
    proc = _run(project, python=str(bare))
    assert proc.returncode == 2
    assert "run it as: uv run --group test bash tests/run_unit.sh" in proc.stderr


def test_help_needs_neither_pytest_nor_ray(project: Path, tmp_path: Path) -> None:
    bare = tmp_path / "bare-python"
    bare.write_text(f'#!/bin/sh\nexec {sys.executable} -S "$@"\n')  # -S: no site-packages
    bare.chmod(0o755)
    proc = _run(project, "--help", python=str(bare))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("usage: bash tests/run_unit.sh")


def test_upstream_style_unit_paths_are_accepted_from_the_root(project: Path) -> None:
    # Upstream's run_unit.sh runs from tests/ and takes unit/...; from the root that path
    # does not exist as given, but does under tests/.
    proc = _run(project, "unit/test_ok.py::test_ok")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert " tests/unit/test_ok.py::test_ok" in proc.stdout
    assert "1 passed" in proc.stdout


def test_mcore_only_without_megatron_core_is_one_line_and_exit_2(tmp_path: Path) -> None:
    # A `megatron` package without `core`, first on the path: megatron.core cannot be
    # imported, whether or not the real one is installed.
    shim = tmp_path / "shim"
    (shim / "megatron").mkdir(parents=True)
    (shim / "megatron" / "__init__.py").write_text("")
    pythonpath = os.pathsep.join(p for p in (str(shim), os.environ.get("PYTHONPATH", "")) if p)
    proc = _run(SCRIPT.parents[1], "--mcore-only", extra_env={"PYTHONPATH": pythonpath})
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert proc.stderr.splitlines() == [
        "run_unit: --mcore-only needs megatron-core, which cannot be imported (No module named 'megatron.core'); "
        "run it as: uv run --extra mcore --group test bash tests/run_unit.sh --mcore-only"
    ]


@pytest.mark.parametrize("link", ["file", "chain", "folder"])
def test_through_a_symlink_it_runs_the_checkout_it_lives_in(tmp_path: Path, link: str) -> None:
    """A symlink to the script (or a relative symlink to such a link, or to the tests/ folder)
    in another folder still finds this checkout: its help names this repository's groups."""
    elsewhere = tmp_path / "elsewhere" / "bin"  # whose parent is no project
    elsewhere.mkdir(parents=True)
    if link == "file":
        (elsewhere / "run_unit.sh").symlink_to(SCRIPT)
        script = elsewhere / "run_unit.sh"
    elif link == "chain":
        (elsewhere / "first.sh").symlink_to(SCRIPT)
        (elsewhere / "run_unit.sh").symlink_to("first.sh")  # relative, to another link
        script = elsewhere / "run_unit.sh"
    else:
        (elsewhere / "tests").symlink_to(SCRIPT.parent, target_is_directory=True)
        script = elsewhere / "tests" / "run_unit.sh"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "TESTHARNESS_"))}
    proc = subprocess.run(
        ["bash", str(script), "--help"], cwd=tmp_path, env={**env, "PYTHON": sys.executable},
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("usage: bash tests/run_unit.sh [--hf-gated] [--mcore-only]"), proc.stdout
