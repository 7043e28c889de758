"""Plan first (issue 36, item 1): a `-n N --testmon` run decides what it will run before it
starts workers or a Ray cluster: nothing selected, neither; a few files, no more workers than
files. Real pytest-xdist, real pytest-testmon, real Ray, through tests/run_unit.sh."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from records_project import run_env
from xdist_project import Head

RUN_UNIT = Path(__file__).resolve().parents[3] / "tests" / "run_unit.sh"  # this repository's

PYPROJECT = """
[tool.testharness]
source_packages = ["mylib"]
results_dir = "out"
test_roots = ["tests"]

[tool.testharness.marker_groups.mcore]
option = "--mcore-only"
mode = "only"

[tool.pytest.ini_options]
testpaths = ["tests"]
"""


def _project(root: Path) -> Path:
    (root / "pyproject.toml").write_text(PYPROJECT)
    (root / "mylib").mkdir()
    (root / "mylib" / "__init__.py").write_text("")
    (root / "mylib" / "a.py").write_text("def f():\n    return 1\n")
    (root / "mylib" / "b.py").write_text("def g():\n    return 2\n")
    (root / "tests").mkdir()
    for i in range(4):
        (root / "tests" / f"test_a{i}.py").write_text(
            f"from mylib.a import f\n\ndef test_a{i}():\n    assert f() == 1\n"
        )
    (root / "tests" / "test_b.py").write_text("from mylib.b import g\n\ndef test_b():\n    assert g() == 2\n")
    # Left out of every default run, so testmon never records it: the plan reads its marks.
    # Left out whole, so not even imported (it leaves a file when it is).
    (root / "tests" / "test_mcore.py").write_text(
        "import pathlib\nimport pytest\n\npathlib.Path(__file__ + '.imported').touch()\n"
        "pytestmark = pytest.mark.mcore\n\ndef test_m():\n    pass\n"
    )
    return root


def _run(root: Path, ray_tmp: Path, head: Head | None = None) -> tuple[subprocess.CompletedProcess[str], int]:
    """run_unit.sh --testmon -n 3; (the process, Ray clusters it started: none where it joins `head`)."""
    env = {**run_env(root), "RAY_TMPDIR": str(ray_tmp)}
    if head:  # as xdist_project.env_for joins it
        env.update(RAY_ADDRESS=head.address, RAY_AUTH_MODE="token", RAY_TMPDIR=head.ray_tmpdir)
    before = len(list(ray_tmp.glob("ray/session_2*")))
    proc = subprocess.run(["bash", str(RUN_UNIT), "--testmon", "-n", "3", "-p", "no:randomly"], cwd=root, env=env,
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    return proc, len(list(ray_tmp.glob("ray/session_2*"))) - before


def test_nothing_selected_starts_no_worker_and_no_ray_and_a_few_files_few_workers(
    tmp_path: Path, shared_head: Head
) -> None:
    root = _project(tmp_path)
    ray_tmp = Path(run_env(root)["RAY_TMPDIR"])
    seed, clusters = _run(root, ray_tmp)
    assert seed.returncode == 0, seed.stdout + seed.stderr
    assert "3 xdist workers share the Ray cluster" in seed.stdout and clusters == 1

    same, clusters = _run(root, ray_tmp)  # no change
    out = same.stdout + same.stderr
    assert same.returncode == 0, out
    assert "testharness: no test file to run: no xdist workers, no Ray cluster" in out
    assert "bringing up nodes" not in out and "xdist workers share" not in out and clusters == 0
    record = json.loads((root / "out" / "unit_results.json").read_text())
    assert record["exit_status"] == 0 and record["tests"] == {}

    (root / "mylib" / "b.py").write_text("def g():\n    return 1 + 1\n")  # reaches test_b.py only
    edit, _ = _run(root, ray_tmp, shared_head)  # the workers, not the cluster: a cluster already running
    out = edit.stdout + edit.stderr
    assert edit.returncode == 0, out
    assert "testharness: 1 test file(s) to run: 1 xdist worker(s) instead of 3" in out
    assert list(json.loads((root / "out" / "unit_results.json").read_text())["tests"]) == ["tests/test_b.py::test_b"]
    assert not (root / "tests" / "test_mcore.py.imported").exists()  # three --testmon runs, never collected

    env = {**run_env(root), "RAY_TMPDIR": str(ray_tmp)}
    mcore = subprocess.run(["bash", str(RUN_UNIT), "--testmon", "--mcore-only", "-p", "no:randomly"], cwd=root,
                           env=env, capture_output=True, text=True, timeout=300)  # fmt: skip
    assert mcore.returncode == 0, mcore.stdout + mcore.stderr
    assert list(json.loads((root / "out" / "unit_results.json").read_text())["tests"]) == [
        "tests/test_mcore.py::test_m"
    ]
