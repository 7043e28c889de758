"""A toy project for the selection tests: a package whose two functional scripts reach
different functions, the real tests/functional/common.sh and run_all.sh, a git repository."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
FUNCTIONAL = REPO_ROOT / "tests" / "functional"

PYPROJECT = """[project]
name = "toy"
version = "0"

[tool.pytest.ini_options]
testpaths = ["tests/unit"]

[tool.testharness]
source_packages = ["toypkg"]
remote_map_file = ".toy_remote_map.json"
remote_state_file = ".toy_remote_state.json"

[tool.testharness.hygiene]
leak_check = false

[tool.testharness.functional]
reach_file = ".toy_reach.json"
environment = ["uv.lock"]
harness = ["tests/functional/common.sh", "tests/functional/run_all.sh"]
unrelated = ["docs/*"]
"""

MODEL = """SCALE = 1.0


def first_loss(step):
    return 10.0 - 0.9 * step * SCALE


def second_loss(step):
    return 10.0 - 0.9 * step * SCALE
"""

TRAIN = """import os
import sys
import time
from pathlib import Path

from torch.utils.tensorboard import SummaryWriter

from toypkg import model

args = dict(a.split("=", 1) for a in sys.argv[1:])
Path(__file__).with_name("settings.txt").read_text()
loss = getattr(model, args["loss"])
w = SummaryWriter(args["log_dir"])
for step in range(1, 11):
    w.add_scalar("train/loss", loss(step), step)
w.close()
time.sleep(float(os.environ.get("TOY_SLEEP", "0")))  # a run long enough to interrupt
"""

SCRIPT = """#!/usr/bin/env bash
# num-gpus: 0
source "$(dirname "${{BASH_SOURCE[0]}}")/common.sh"
run_experiment() {{ functional_python train.py loss={loss} log_dir="$LOG_DIR" "$@"; }}
check_experiment() {{ functional_check 'data["train/loss"]["10"] < 0.5 * data["train/loss"]["1"]'; }}
functional_main "$@"
"""

GITIGNORE = """tests/functional/*/
.toy_*
.testmondata*
.coverage*
tests/.coverage*
__pycache__/
.pytest_cache/
tests/unit/unit_results*
state*.tgz
"""

ENV = {**os.environ, "PYTHON": sys.executable, "COVERAGE_SOURCE": "toypkg", "GIT_AUTHOR_NAME": "t",
       "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}  # fmt: skip
for _name in ("CUDA_VISIBLE_DEVICES", "TESTMON_DATAFILE", "PYTEST_ADDOPTS", "RAY_ADDRESS", "GITHUB_STEP_SUMMARY"):
    ENV.pop(_name, None)


def sh(cwd: Path, *args: str, ok: bool = True, **env: str) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        list(args), cwd=cwd, env={**ENV, **env}, capture_output=True, text=True, check=False, timeout=300
    )
    if ok:
        assert done.returncode == 0, f"{args}: {done.returncode}\n{done.stdout}\n{done.stderr}"
    return done


def git(cwd: Path, *args: str) -> str:
    return sh(cwd, "git", *args).stdout


def write_toy(repo: Path) -> None:
    """The toy's files (not committed): toypkg, train.py, scripts `first` and `second`, a unit
    test of each loss, uv.lock, docs/, settings.txt (read by train.py)."""
    functional = repo / "tests" / "functional"
    functional.mkdir(parents=True)
    (repo / "tests" / "unit").mkdir(parents=True)
    for name in ("common.sh", "run_all.sh"):
        shutil.copy(FUNCTIONAL / name, functional / name)
    for entry in ("check_metrics.py", "json_dump_tb_logs.py"):
        shutil.copy(REPO_ROOT / "tests" / entry, repo / "tests" / entry)
    (repo / "pyproject.toml").write_text(PYPROJECT)
    (repo / ".gitignore").write_text(GITIGNORE)
    (repo / "uv.lock").write_text("lock\n")
    (repo / "toypkg").mkdir()
    (repo / "toypkg" / "__init__.py").write_text("")
    (repo / "toypkg" / "model.py").write_text(MODEL)
    (repo / "train.py").write_text(TRAIN)
    (repo / "settings.txt").write_text("a setting\n")
    (repo / "docs").mkdir()
    (repo / "docs" / "guide.md").write_text("guide\n")
    for which in ("first", "second"):
        (repo / "tests" / "unit" / f"test_{which}.py").write_text(
            f"from toypkg.model import {which}_loss\n\n\ndef test_{which}():\n    assert {which}_loss(1) > 0\n"
        )
        (functional / f"{which}.sh").write_text(SCRIPT.format(loss=f"{which}_loss"))


def run_all(repo: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return sh(repo, "bash", str(repo / "tests" / "functional" / "run_all.sh"), *args, ok=False, **env)


def verdicts(repo: Path, *args: str) -> dict[str, str]:
    """run_all.sh --affected --list: {script: its verdict line}."""
    done = run_all(repo, "--affected", "--list", *args)
    assert done.returncode == 0, done.stdout + done.stderr
    return {row.split()[0]: row.split(None, 2)[2] for row in done.stdout.splitlines()[1:]}


def edit(repo: Path, rel: str, old: str, new: str) -> None:
    path = repo / rel
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new))
