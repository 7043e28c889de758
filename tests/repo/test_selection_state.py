"""The CI recipe of docs/testmon.md, end to end with a bare git remote: the main branch saves
its selection state (`testharness state save`), a pull request's fresh clone loads it and
selects only what its edit reaches, unit tests (real pytest-testmon) and functional scripts
(the real run_all.sh) alike; a state that does not fit the clone runs everything."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
FUNCTIONAL = REPO_ROOT / "tests" / "functional"

pytestmark = pytest.mark.skipif(
    shutil.which("bash") is None or shutil.which("git") is None, reason="needs bash and git"
)

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
"""

MODEL = """def first_loss(step):
    return 10.0 - 0.9 * step


def second_loss(step):
    return 10.0 - 0.9 * step
"""

TRAIN = """import sys

from torch.utils.tensorboard import SummaryWriter

from toypkg import model

args = dict(a.split("=", 1) for a in sys.argv[1:])
loss = getattr(model, args["loss"])
w = SummaryWriter(args["log_dir"])
for step in range(1, 11):
    w.add_scalar("train/loss", loss(step), step)
w.close()
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
tests/unit/unit_results*
state*.tgz
.pytest_cache/
"""

ENV = {**os.environ, "PYTHON": sys.executable, "COVERAGE_SOURCE": "toypkg", "GIT_AUTHOR_NAME": "t",
       "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}  # fmt: skip
for _name in ("CUDA_VISIBLE_DEVICES", "TESTMON_DATAFILE", "PYTEST_ADDOPTS", "RAY_ADDRESS"):
    ENV.pop(_name, None)


def sh(cwd: Path, *args: str, ok: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(list(args), cwd=cwd, env=ENV, capture_output=True, text=True, check=False, timeout=300)
    if ok:
        assert done.returncode == 0, f"{args}: {done.returncode}\n{done.stdout}\n{done.stderr}"
    return done


def git(cwd: Path, *args: str) -> str:
    return sh(cwd, "git", *args).stdout


def harness(cwd: Path, *args: str) -> str:
    return sh(cwd, sys.executable, "-m", "testharness", *args).stdout


def unit_tests_run(clone: Path, *args: str) -> list[str]:
    """The tests a `pytest --testmon` run executed (the names of the passing ones)."""
    done = sh(clone, sys.executable, "-m", "pytest", "--testmon", "-v", *args, ok=False)
    assert done.returncode in (0, 5), done.stdout + done.stderr
    return sorted(re.findall(r"::(test_\w+) PASSED", done.stdout))


def scripts_run(clone: Path) -> dict[str, str]:
    done = sh(clone, "bash", "tests/functional/run_all.sh", "--affected", "--list")
    return {row.split()[0]: row.split(None, 2)[2].split(":")[0] for row in done.stdout.splitlines()[1:]}


@pytest.fixture(scope="module")
def remote(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A bare remote whose main branch ran everything once and saved its state (state.tgz
    beside it), with a branch `feature` that edits first_loss only."""
    top = tmp_path_factory.mktemp("ci")
    bare = top / "remote.git"
    git(top, "init", "-q", "--bare", "-b", "main", str(bare))
    main = top / "main"
    git(top, "clone", "-q", str(bare), str(main))
    (main / "tests" / "functional").mkdir(parents=True)
    (main / "tests" / "unit").mkdir(parents=True)
    for name in ("common.sh", "run_all.sh"):
        shutil.copy(FUNCTIONAL / name, main / "tests" / "functional" / name)
    for entry in ("check_metrics.py", "json_dump_tb_logs.py"):
        shutil.copy(REPO_ROOT / "tests" / entry, main / "tests" / entry)
    (main / "pyproject.toml").write_text(PYPROJECT)
    (main / ".gitignore").write_text(GITIGNORE)
    (main / "uv.lock").write_text("lock\n")
    (main / "toypkg").mkdir()
    (main / "toypkg" / "__init__.py").write_text("")
    (main / "toypkg" / "model.py").write_text(MODEL)
    (main / "train.py").write_text(TRAIN)
    for which in ("first", "second"):
        (main / "tests" / "unit" / f"test_{which}.py").write_text(
            f"from toypkg.model import {which}_loss\n\n\ndef test_{which}():\n    assert {which}_loss(1) > 0\n"
        )
        (main / "tests" / "functional" / f"{which}.sh").write_text(SCRIPT.format(loss=f"{which}_loss"))
    git(main, "add", ".")
    git(main, "commit", "-q", "-m", "toy")
    git(main, "push", "-q", "origin", "main")
    # The main branch's CI: everything runs once, then the state is saved as an artifact.
    assert unit_tests_run(main) == ["test_first", "test_second"]
    sh(main, "bash", "tests/functional/run_all.sh")
    saved = harness(main, "state", "save", str(top / "state.tgz"))
    assert "saved" in saved and "testmondata.sqlite" in saved and "functional_reach.json" in saved, saved
    # A pull request: one function changed.
    git(main, "checkout", "-q", "-b", "feature")
    (main / "toypkg" / "model.py").write_text(
        MODEL.replace("return 10.0 - 0.9 * step\n\n", "return 10.5 - 0.9 * step\n\n", 1)
    )
    git(main, "commit", "-q", "-am", "first_loss starts higher")
    git(main, "push", "-q", "origin", "feature")
    # A state made on a commit the pull request does not contain.
    git(main, "checkout", "-q", "-b", "elsewhere", "main")
    (main / "unrelated.txt").write_text("x\n")
    git(main, "add", ".")
    git(main, "commit", "-q", "-m", "elsewhere")
    harness(main, "state", "save", str(top / "state-elsewhere.tgz"))
    return top


@pytest.fixture
def pr(remote: Path, tmp_path: Path) -> Path:
    """A fresh clone of the pull request's branch, as a CI runner starts."""
    clone = tmp_path / "pr"
    git(tmp_path, "clone", "-q", "-b", "feature", str(remote / "remote.git"), str(clone))
    return clone


def test_a_pull_request_selects_against_its_base_branch_state(remote: Path, pr: Path) -> None:
    loaded = harness(pr, "state", "load", str(remote / "state.tgz"))
    assert re.fullmatch(
        r"testharness state: loaded state.tgz, made at [0-9a-f]{12} \(1 commit\(s\) behind HEAD\): .*\n", loaded
    ), loaded
    assert scripts_run(pr) == {"first": "runs", "second": "skipped"}
    # N runners share the selection: the shards of what testmon selected, not of the suite.
    shards = [unit_tests_run(pr, "--shard", f"{i}/2") for i in (1, 2)]
    assert sorted(shards) == [[], ["test_first"]]
    assert unit_tests_run(pr) == []  # it passed in its shard: testmon recorded that


@pytest.mark.parametrize(
    "case, why",
    [
        ("elsewhere", "its commit [0-9a-f]{12} is not an ancestor of HEAD"),
        ("lock", "it was made under another uv.lock"),
        ("truncated", "state.tgz is damaged"),
        ("project", "it was made for the project 'toy', this is 'other'"),
    ],
)
def test_a_state_that_does_not_fit_runs_everything_and_says_why(remote: Path, pr: Path, case: str, why: str) -> None:
    artifact = remote / "state.tgz"
    if case == "elsewhere":
        artifact = remote / "state-elsewhere.tgz"
    elif case == "lock":
        (pr / "uv.lock").write_text("another lock\n")
    elif case == "truncated":
        data = artifact.read_bytes()
        artifact = pr.parent / "state.tgz"
        artifact.write_bytes(data[: len(data) // 2])
    else:
        (pr / "pyproject.toml").write_text(PYPROJECT.replace('name = "toy"', 'name = "other"'))
    # A stale state of the clone's own must not survive a load that failed.
    (pr / ".testmondata").write_text("stale")
    said = harness(pr, "state", "load", str(artifact))
    assert said.count("\n") == 1 and re.match(rf"testharness state: not loaded, everything runs: {why}", said), said
    assert not (pr / ".testmondata").exists()
    assert unit_tests_run(pr) == ["test_first", "test_second"]
    assert scripts_run(pr) == {"first": "runs", "second": "runs"}
