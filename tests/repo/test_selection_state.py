"""The CI recipe of docs/testmon.md, end to end with a bare git remote: the main branch saves
its selection state (`testharness state save`), a pull request's fresh clone loads it and
selects only what its edit reaches, unit tests (real pytest-testmon) and functional scripts
(the real run_all.sh) alike; a state that does not fit the clone runs everything."""

from __future__ import annotations

import re
import shutil
import sys
from pathlib import Path

import pytest
from toy_functional import PYPROJECT, edit, git, run_all, sh, verdicts, write_toy

pytestmark = pytest.mark.skipif(
    shutil.which("bash") is None or shutil.which("git") is None, reason="needs bash and git"
)


def harness(cwd: Path, *args: str) -> str:
    return sh(cwd, sys.executable, "-m", "testharness", *args).stdout


def unit_tests_run(clone: Path, *args: str) -> list[str]:
    """The tests a `pytest --testmon` run executed (the names of the passing ones)."""
    done = sh(clone, sys.executable, "-m", "pytest", "--testmon", "-v", *args, ok=False)
    assert done.returncode in (0, 5), done.stdout + done.stderr
    return sorted(re.findall(r"::(test_\w+) PASSED", done.stdout))


def scripts_run(clone: Path) -> dict[str, str]:
    return {name: verdict.split(":")[0] for name, verdict in verdicts(clone).items()}


@pytest.fixture(scope="module")
def remote(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A bare remote whose main branch ran everything once and saved its state (state.tgz
    beside it), with a branch `feature` that edits first_loss only."""
    top = tmp_path_factory.mktemp("ci")
    bare = top / "remote.git"
    git(top, "init", "-q", "--bare", "-b", "main", str(bare))
    main = top / "main"
    git(top, "clone", "-q", str(bare), str(main))
    write_toy(main)
    git(main, "add", ".")
    git(main, "commit", "-q", "-m", "toy")
    git(main, "push", "-q", "origin", "main")
    # The main branch's CI: everything runs once, then the state is saved as an artifact.
    assert unit_tests_run(main) == ["test_first", "test_second"]
    assert run_all(main).returncode == 0
    saved = harness(main, "state", "save", str(top / "state.tgz"))
    assert "saved" in saved and "testmondata.sqlite" in saved and "functional_reach.json" in saved, saved
    # A pull request: one function changed.
    git(main, "checkout", "-q", "-b", "feature")
    edit(main, "toypkg/model.py", "def first_loss(step):\n    return 10.0", "def first_loss(step):\n    return 10.5")
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
