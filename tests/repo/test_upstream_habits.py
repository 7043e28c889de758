"""What a NeMo RL developer brings over from upstream runs unchanged (subprocess).

- a test file in upstream's style (`@pytest.mark.vllm` beside a plain test) in a project with
  this repository's pyproject.toml: the vllm test is deselected, not a "'vllm' not found in
  markers" stop; `--vllm-only` without vllm is one line and exit 2; the --*-only flags are
  mutually exclusive;
- upstream's L0 invocations: `cd tests; bash run_unit.sh unit/ --ignore=unit/...` and, from
  the root, `bash tests/run_unit.sh unit/ --ignore=unit/... --deselect unit/...::test`;
- `./tests/check_metrics.py` and `./tests/json_dump_tb_logs.py` are executable (uv shebang),
  from the root and from another directory, and `uv run tests/check_metrics.py` still works.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

UPSTREAM_STYLE = """\
import pytest


def test_plain():
    pass


@pytest.mark.vllm
def test_vllm_generation():
    pass


def test_dropped_by_deselect():
    raise AssertionError("the deselected test ran")
"""

IGNORED = """\
def test_in_the_ignored_folder():
    raise AssertionError("the ignored file ran")
"""


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """This repository's pyproject.toml (its marker groups, strict markers) and run_unit.sh,
    with a tests/unit of upstream-style files instead of the library's suite."""
    root = tmp_path / "proj"
    unit = root / "tests" / "unit"
    (unit / "models" / "generation").mkdir(parents=True)
    shutil.copy(REPO / "pyproject.toml", root / "pyproject.toml")
    shutil.copy(REPO / "tests" / "run_unit.sh", root / "tests" / "run_unit.sh")
    (unit / "test_upstream_style.py").write_text(UPSTREAM_STYLE)
    (unit / "models" / "generation" / "test_generation_ignored.py").write_text(IGNORED)
    return root


def _run(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "TESTHARNESS_"))}
    env.update(PYTHON=sys.executable, TESTHARNESS_NO_DISCOVERY="1")  # no Ray probing / asset building
    return subprocess.run(list(args), cwd=cwd, env=env, capture_output=True, text=True, timeout=180)


def _ran(project: Path) -> dict[str, str]:
    """test name -> outcome, from the run's unit_results.json (what really ran)."""
    tests = json.loads((project / "tests" / "unit" / "unit_results.json").read_text())["tests"]
    return {nodeid.split("::")[-1]: t["outcome"] for nodeid, t in tests.items()}


@pytest.mark.parametrize(
    ("where", "args"),
    [
        # upstream's run_unit.sh cds into tests/ and takes unit/... paths
        ("tests", ["bash", "run_unit.sh", "unit/", "--ignore=unit/models/generation/",
                   "--deselect", "unit/test_upstream_style.py::test_dropped_by_deselect"]),
        # upstream's L0 shard scripts call it from the root with the same arguments
        (".", ["bash", "tests/run_unit.sh", "unit/", "--ignore=unit/models/generation/",
               "--deselect=unit/test_upstream_style.py::test_dropped_by_deselect"]),
        (".", ["bash", "tests/run_unit.sh", "unit/", "--ignore", "unit/models/generation/",
               "--deselect", "unit/test_upstream_style.py::test_dropped_by_deselect"]),
    ],
    ids=["cd-tests", "root-equals", "root-two-tokens"],
)  # fmt: skip
def test_upstream_invocation_ignores_deselects_and_leaves_vllm_out(project: Path, where: str, args: list[str]) -> None:
    proc = _run(project / where, *args)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert "not found in `markers`" not in out
    assert _ran(project) == {"test_plain": "passed"}  # nor the ignored file, nor vllm's, nor the deselected
    assert "1 passed, 2 deselected" in proc.stdout
    assert proc.stdout.rstrip().endswith("run_unit: all selected tests passed")


def test_vllm_only_without_vllm_is_one_line_and_exit_2(project: Path) -> None:
    if importlib.util.find_spec("vllm") is not None:
        pytest.skip("vllm is installed here")
    proc = _run(project / "tests", "bash", "run_unit.sh", "unit/", "--vllm-only")
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert proc.stderr.splitlines() == [
        "run_unit: --vllm-only needs vllm, which cannot be imported (No module named 'vllm'); this project has no "
        "vllm extra: add one to [project.optional-dependencies] and run with uv run --extra vllm, or drop "
        "--vllm-only (tests marked vllm are deselected by default)"
    ]
    assert not (project / "tests" / "unit" / "unit_results.json").exists()  # nothing started


@pytest.mark.parametrize("flags", [("--vllm-only", "--mcore-only"), ("--sglang-only", "--nemo-gym-only")])
def test_only_flags_are_mutually_exclusive(project: Path, flags: tuple[str, ...]) -> None:
    proc = _run(project, "bash", "tests/run_unit.sh", *flags)
    assert proc.returncode == 2
    assert proc.stdout == ""
    (line,) = proc.stderr.splitlines()
    assert line.startswith("run_unit: ") and " are mutually exclusive: give one of --mcore-only, --vllm-only" in line
    assert all(flag in line.split(":")[1] for flag in flags)


def test_a_collection_error_is_named_so(project: Path) -> None:
    (project / "tests" / "unit" / "test_broken.py").write_text("import no_such_module_xyz\n")
    proc = _run(project, "bash", "tests/run_unit.sh")
    assert proc.returncode == 2
    assert "Interrupted: 1 error during collection" in proc.stdout
    assert proc.stderr.splitlines()[-1].startswith("run_unit: stopped by errors during collection")
    assert "Ctrl-C" not in proc.stdout + proc.stderr


# ------------------------------------------------ check_metrics.py, json_dump_tb_logs.py

SCRIPTS = ["tests/check_metrics.py", "tests/json_dump_tb_logs.py"]
needs_uv = pytest.mark.skipif(shutil.which("uv") is None, reason="the shebang runs uv, not on PATH here")


@pytest.mark.parametrize("script", SCRIPTS)
def test_entry_points_are_executable_with_a_uv_shebang(script: str) -> None:
    assert os.access(REPO / script, os.X_OK)
    assert (REPO / script).read_text().splitlines()[0] == "#!/usr/bin/env -S uv run"
    staged = subprocess.run(["git", "ls-files", "--stage", script], cwd=REPO, capture_output=True, text=True)
    if staged.returncode == 0:  # in a git checkout (not an exported tree): the mode a clone gets
        assert staged.stdout.split()[0] == "100755"


@needs_uv
@pytest.mark.parametrize("script", SCRIPTS)
def test_entry_points_run_from_the_root_and_from_elsewhere(script: str, tmp_path: Path) -> None:
    for cwd, path in [(REPO, f"./{script}"), (tmp_path, str(REPO / script))]:
        proc = _run(cwd, path, "--help")
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.startswith(f"usage: {Path(script).name}")


@needs_uv
def test_check_metrics_checks_from_another_directory_and_through_uv_run(tmp_path: Path) -> None:
    (tmp_path / "metrics.json").write_text('{"train/loss": {"1": 2.0, "2": 1.0}}')
    ok, bad = 'data["train/loss"]["2"] < 1.5', 'data["train/loss"]["2"] > 1.5'
    assert _run(tmp_path, str(REPO / "tests/check_metrics.py"), "metrics.json", ok).returncode == 0
    assert _run(tmp_path, str(REPO / "tests/check_metrics.py"), "metrics.json", bad).returncode == 1
    # upstream's spelling, from the root
    proc = _run(REPO, "uv", "run", "tests/check_metrics.py", str(tmp_path / "metrics.json"), ok)
    assert proc.returncode == 0, proc.stderr
