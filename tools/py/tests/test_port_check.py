"""testharness port-check: a file brought over from another checkout that would replace, or has
replaced, one of the project's files (test files, conftest.py, `__init__.py`, the asset script,
helpers), and the scripts it brought that name a renamed test file. Pure rules, then the command
in scratch git checkouts."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from testharness.__main__ import main
from testharness.port_rules import (
    COVERED,
    covered_table,
    defined_tests,
    destination,
    replaced,
    rewrite_references,
    role_of,
    side_name,
    verdict,
)

OURS = b"""import pytest


def test_group_advantages():
    assert 1 + 1 == 2


def test_reject_ragged_groups():
    with pytest.raises(ValueError):
        raise ValueError


class TestStep:
    def test_one_step(self):
        pass
"""

THEIRS = b"""import torch

from nemo_rl.algorithms.grpo import calculate_rewards


def test_calculate_rewards_single_task():
    assert calculate_rewards is not None


def test_calculate_rewards_missing_environment():
    assert torch.tensor(1)
"""

EDITED = (
    OURS.replace(b"def test_reject_ragged_groups", b"def test_ragged_groups_are_refused")
    + b"\n\ndef test_more():\n    pass\n"
)


# ---------------------------------------------------------------- pure


def test_tests_defined_are_what_pytest_collects_at_top_level() -> None:
    assert defined_tests(OURS) == ["test_group_advantages", "test_reject_ragged_groups", "TestStep"]
    assert defined_tests(b"def helper():\n    pass\nclass Other:\n    pass\n") == []
    assert defined_tests(b"def broken(:\n") == []


def test_a_copy_replaces_an_edit_does_not() -> None:
    assert replaced(OURS, THEIRS)
    assert not replaced(OURS, EDITED)  # one test renamed, one added: most tests and lines kept
    assert not replaced(OURS, OURS)
    assert not replaced(b"def helper():\n    pass\n", THEIRS)  # no tests to judge by


def test_every_other_file_counts_as_replaced_when_most_of_its_lines_differ() -> None:
    conftest = b"import pytest\n\n\n@pytest.fixture\ndef tiny():\n    return 1\n"
    assert replaced(conftest, b"import ray\nimport torch\n\n\ndef other():\n    pass\n", "conftest")
    assert not replaced(conftest, conftest + b"\n\n@pytest.fixture\ndef more():\n    return 2\n", "conftest")
    assert not replaced(conftest, conftest, "helper")
    # an empty __init__.py: any content replaces it (upstream's carry a licence and pytest_plugins)
    assert replaced(b"", b"# Copyright\npytest_plugins = ['x']\n", "package")
    assert not replaced(b"", b"", "package")


@pytest.mark.parametrize(
    "rel, role",
    [
        ("tests/unit/a/test_x.py", "test file"),
        ("tests/unit/a/x_test.py", "test file"),
        ("tests/unit/conftest.py", "conftest"),
        ("tests/unit/a/__init__.py", "package"),
        ("tests/unit/prepare.py", "asset script"),
        ("tests/unit/helpers.py", "helper"),
        ("tests/unit/run.sh", "helper"),
    ],
)
def test_each_file_has_one_role(rel: str, role: str) -> None:
    assert role_of(rel, "tests/unit/prepare.py") == role


def test_the_covered_table_has_a_row_per_role_and_one_for_references() -> None:
    rows = covered_table()
    assert len(rows) == len(COVERED) + 1 and all(row.startswith("| ") and row.count(" | ") == 2 for row in rows)
    assert {c.role for c in COVERED} == {"test file", "conftest", "package", "asset script", "helper"}


def test_names_of_a_renamed_test_file_are_pointed_at_its_copy() -> None:
    script = (
        "EXCLUDED=(\n"
        "    --deselect=tests/unit/algorithms/test_grpo.py::test_a\n"
        "    --ignore=unit/algorithms/test_grpo.py\n"
        '    "./tests/unit/algorithms/test_grpo.py::TestB::test_c[p1]"\n'
        "    --deselect=tests/unit/test_grpo.py::test_d\n"  # another file of that name
        "    --ignore=unit/algorithms/test_grpo.pyc other/tests/unit/algorithms/test_grpo.py\n"
        "    --deselect=tests/unit/algorithms/test_grpo_v2.py::test_e\n"
        ")\n"
    )
    renamed = {"tests/unit/algorithms/test_grpo.py": "tests/unit/algorithms/test_grpo_upstream.py"}
    text, counts = rewrite_references(script, renamed, ["tests/unit"])
    assert counts == {"tests/unit/algorithms/test_grpo.py": 3}
    assert text.splitlines()[1:4] == [
        "    --deselect=tests/unit/algorithms/test_grpo_upstream.py::test_a",
        "    --ignore=unit/algorithms/test_grpo_upstream.py",
        '    "./tests/unit/algorithms/test_grpo_upstream.py::TestB::test_c[p1]"',
    ]
    assert text.splitlines()[4:] == script.splitlines()[4:]  # the rest as it was
    assert rewrite_references(script, {"lib/test_x.py": "lib/test_x_upstream.py"}, ["tests/unit"]) == (script, {})


def test_destination_is_the_path_under_the_test_root(tmp_path: Path) -> None:
    root = tmp_path / "proj"
    roots = [root / "tests" / "unit"]
    upstream = tmp_path / "RL" / "tests" / "unit" / "algorithms" / "test_grpo.py"
    assert destination(upstream, root, roots) == root / "tests" / "unit" / "algorithms" / "test_grpo.py"
    # the last tests/unit of the path counts
    nested = tmp_path / "tests" / "unit" / "RL" / "tests" / "unit" / "test_x.py"
    assert destination(nested, root, roots) == root / "tests" / "unit" / "test_x.py"
    assert destination(tmp_path / "downloads" / "test_grpo.py", root, roots) is None
    assert side_name(Path("tests/unit/a/test_grpo.py")) == Path("tests/unit/a/test_grpo_upstream.py")


@pytest.mark.parametrize(
    "here, at_ref, kind",
    [
        (None, None, "new"),
        (THEIRS, None, "identical"),  # ported before, untracked
        (THEIRS, THEIRS, "identical"),  # ported and committed
        (OURS, OURS, "collides"),
        (None, OURS, "collides"),  # deleted in the working tree, still in git
        (THEIRS, OURS, "replaced"),  # git holds ours, the working tree the copy
    ],
)
def test_verdicts(here: bytes | None, at_ref: bytes | None, kind: str) -> None:
    assert verdict("tests/unit/a/test_grpo.py", THEIRS, here, at_ref, "HEAD", True).kind == kind


def test_a_collision_says_what_is_there_and_where_the_copy_goes() -> None:
    found = verdict("tests/unit/a/test_grpo.py", THEIRS, OURS, OURS, "HEAD", True)
    assert found.detail == (
        "is this project's test file (3 tests): copying would replace it; "
        "copy the upstream file as tests/unit/a/test_grpo_upstream.py"
    )
    other = verdict(
        "tests/unit/conftest.py", b"import pytest\n", b"def test_assets():\n    pass\n", None, "HEAD", False
    )
    assert (
        other.detail
        == "is this project's file: copying would replace it; keep this project's and bring what you need into it by hand"
    )


# ---------------------------------------------------------------- the command, in scratch checkouts


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(cwd), *args], check=True, capture_output=True, text=True).stdout


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A git checkout with tests/unit/algorithms/test_grpo.py committed, the command run from it."""
    root = tmp_path / "proj"
    (root / "tests" / "unit" / "algorithms").mkdir(parents=True)
    (root / "pyproject.toml").write_text('[tool.testharness]\ntest_roots = ["tests/unit"]\n')
    (root / "tests" / "unit" / "algorithms" / "test_grpo.py").write_bytes(OURS)
    (root / "tests" / "unit" / "test_other.py").write_text("def test_other():\n    pass\n")
    git(root, "init", "-q")
    git(root, "add", ".")
    git(root, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "ours")
    monkeypatch.chdir(root)
    return root


@pytest.fixture
def upstream(tmp_path: Path) -> Path:
    """Another checkout's test root with a file at our path and a new one."""
    unit = tmp_path / "RL" / "tests" / "unit"
    (unit / "algorithms").mkdir(parents=True)
    (unit / "algorithms" / "test_grpo.py").write_bytes(THEIRS)
    (unit / "algorithms" / "test_sft_v2.py").write_text("def test_v2():\n    pass\n")
    return unit


def test_before_copying_a_collision_is_named_with_the_name_to_use(
    project: Path, upstream: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(
        ["port-check", str(upstream / "algorithms" / "test_grpo.py"), str(upstream / "algorithms" / "test_sft_v2.py")]
    )
    out, err = capsys.readouterr()
    assert code == 1
    assert out.splitlines() == [
        "port-check: COLLIDES: tests/unit/algorithms/test_grpo.py is this project's test file (3 tests): copying "
        "would replace it; copy the upstream file as tests/unit/algorithms/test_grpo_upstream.py",
        "port-check: new: tests/unit/algorithms/test_sft_v2.py no file of this project there: copy it",
    ]
    assert err == "port-check: 1 collision (see above)\n"


def test_a_copy_under_the_suggested_name_passes(
    project: Path, upstream: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (project / "tests" / "unit" / "algorithms" / "test_grpo_upstream.py").write_bytes(THEIRS)
    assert main(["port-check"]) == 0
    assert capsys.readouterr().out == "port-check: no file of this project is in the way or replaced\n"


def test_after_a_plain_cp_the_scan_finds_the_replaced_file_and_fix_restores_it(
    project: Path, upstream: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    dest = project / "tests" / "unit" / "algorithms" / "test_grpo.py"
    dest.write_bytes(THEIRS)  # cp -r RL/tests/unit/algorithms tests/unit/
    git(project, "add", ".")  # even staged
    assert main(["port-check"]) == 1
    out, err = capsys.readouterr()
    assert out.splitlines() == [
        "port-check: REPLACED: tests/unit/algorithms/test_grpo.py holds a copy that replaced this project's file "
        "and its 3 tests (test_group_advantages, test_reject_ragged_groups, TestStep) as of HEAD: testharness "
        "port-check --fix tests/unit/algorithms/test_grpo.py keeps the copy as "
        "tests/unit/algorithms/test_grpo_upstream.py and restores this project's file from HEAD"
    ]
    assert err == "port-check: 1 replaced (see above)\n"
    # the file given, instead of the scan, says the same
    assert main(["port-check", str(upstream / "algorithms" / "test_grpo.py")]) == 1
    assert "REPLACED: tests/unit/algorithms/test_grpo.py" in capsys.readouterr().out

    assert main(["port-check", "--fix"]) == 0
    out, _ = capsys.readouterr()
    assert out.splitlines()[1:] == [
        "port-check: fixed: tests/unit/algorithms/test_grpo.py restored from HEAD; the copy is now "
        "tests/unit/algorithms/test_grpo_upstream.py",
        "port-check: no file of this project is in the way or replaced",
    ]
    assert dest.read_bytes() == OURS
    assert (dest.parent / "test_grpo_upstream.py").read_bytes() == THEIRS
    assert git(project, "diff", "--cached", "--name-only") == ""  # the staged copy is unstaged too
    assert main(["port-check"]) == 0


def test_a_committed_copy_is_found_against_the_base_branch(
    project: Path, upstream: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base = git(project, "rev-parse", "HEAD").strip()
    (project / "tests" / "unit" / "algorithms" / "test_grpo.py").write_bytes(THEIRS)
    git(project, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qam", "port")
    assert main(["port-check"]) == 0  # against HEAD: nothing changed since
    assert main(["port-check", "--since", base]) == 1
    assert f"as of {base}" in capsys.readouterr().out


def test_an_edit_of_ours_is_not_a_replacement(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (project / "tests" / "unit" / "algorithms" / "test_grpo.py").write_bytes(EDITED)
    (project / "tests" / "unit" / "test_other.py").unlink()  # a deletion is not a copy either
    assert main(["port-check"]) == 0


@pytest.mark.parametrize(
    "args, message",
    [
        (
            ["port-check", "--since", "no-such-ref"],
            "port-check: error: 'no-such-ref' names no commit of this repository",
        ),
        (["port-check", "/downloads/test_grpo.py"], "port-check: error: not a file: /downloads/test_grpo.py"),
    ],
)
def test_usage_problems_are_one_line_and_exit_2(
    project: Path, capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    assert main(args) == 2
    assert capsys.readouterr().err == message + "\n"


def test_a_file_from_outside_a_test_root_cannot_be_placed(
    project: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    loose = tmp_path / "test_grpo.py"
    loose.write_bytes(THEIRS)
    assert main(["port-check", str(loose)]) == 2
    assert (
        capsys.readouterr().err
        == f"port-check: error: cannot tell where {loose} goes: its path has no tests/unit/ in it\n"
    )


def test_without_git_the_scan_needs_the_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "pyproject.toml").write_text('[tool.testharness]\ntest_roots = ["tests/unit"]\n')
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path.parent))
    assert main(["port-check"]) == 2
    assert "is not a git checkout with a commit: name the files to bring over" in capsys.readouterr().err


# ---------------------------------------------------------------- the copy-first flow: every file a copy replaces

CONFTEST = b"""import pytest


@pytest.fixture
def tiny_model_path():
    return "tests/unit/test_assets/tiny"
"""
UPSTREAM_CONFTEST = b"""import ray
import torch

from upstream_lib.cluster import init_ray


def pytest_configure(config):
    init_ray()
"""
PREPARE = b"def prepare():\n    return 'assets'\n\n\nif __name__ == '__main__':\n    prepare()\n"
HELPER = b"def make_batch(n):\n    return list(range(n))\n"
L0_EXCLUDED = """EXCLUDED_UNIT_TESTS=(
    --deselect=tests/unit/algorithms/test_grpo.py::test_calculate_rewards_single_task
    --deselect=tests/unit/algorithms/test_grpo.py::test_calculate_rewards_missing_environment
    --ignore=unit/algorithms/test_sft_v2.py
)
"""


@pytest.fixture
def whole(project: Path) -> Path:
    """The project with a conftest, package markers, an asset script and a helper committed too."""
    unit = project / "tests" / "unit"
    (project / "pyproject.toml").write_text(
        '[tool.testharness]\ntest_roots = ["tests/unit"]\nassets_script = "tests/unit/prepare.py"\n'
    )
    (unit / "conftest.py").write_bytes(CONFTEST)
    (unit / "__init__.py").touch()
    (unit / "algorithms" / "__init__.py").touch()
    (unit / "prepare.py").write_bytes(PREPARE)
    (unit / "helpers.py").write_bytes(HELPER)
    git(project, "add", ".")
    git(project, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "the rest")
    return project


def _copy_upstream_tree(project: Path) -> None:
    """cp -r RL/tests/unit/. tests/unit/: every file of ours that upstream has too, and new ones."""
    unit = project / "tests" / "unit"
    (unit / "conftest.py").write_bytes(UPSTREAM_CONFTEST)
    (unit / "__init__.py").write_text("# Copyright\npytest_plugins = ['tests.unit._plugins.remote_select']\n")
    (unit / "algorithms" / "__init__.py").write_text("# Copyright (c) upstream\n")
    (unit / "algorithms" / "test_grpo.py").write_bytes(THEIRS)
    (unit / "prepare.py").write_bytes(b"import requests\n\nrequests.get('https://hub/model')\n")
    (unit / "helpers.py").write_bytes(b"from upstream_lib import batches\n")
    (unit / "algorithms" / "test_sft_v2.py").write_text("def test_v2():\n    pass\n")
    (unit / "excluded_unit_tests.sh").write_text(L0_EXCLUDED)


def test_a_whole_tree_copied_over_ours_is_found_and_fixed_file_by_file(
    whole: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    unit = whole / "tests" / "unit"
    _copy_upstream_tree(whole)
    assert main(["port-check"]) == 1
    out, err = capsys.readouterr()
    assert [line.split(" holds ")[0].split(" names ")[0] for line in out.splitlines()] == [
        "port-check: REPLACED: tests/unit/__init__.py",
        "port-check: REPLACED: tests/unit/algorithms/__init__.py",
        "port-check: REPLACED: tests/unit/algorithms/test_grpo.py",
        "port-check: REPLACED: tests/unit/conftest.py",
        "port-check: REPLACED: tests/unit/helpers.py",
        "port-check: REPLACED: tests/unit/prepare.py",
        "port-check: REFERS: tests/unit/excluded_unit_tests.sh",
    ]
    lines = dict(line.split(" ", 3)[2:] for line in out.splitlines())
    assert lines["tests/unit/conftest.py"] == (
        "holds a copy that replaced this project's conftest.py (its fixtures and hooks) as of HEAD: "
        "testharness port-check --fix tests/unit/conftest.py keeps the copy as tests/unit/conftest_upstream.py "
        "and restores this project's file from HEAD"
    )
    assert lines["tests/unit/__init__.py"] == (
        "holds a copy that replaced this project's __init__.py as of HEAD: testharness port-check --fix "
        "tests/unit/__init__.py restores this project's file from HEAD (the copy is not kept)"
    )
    assert "replaced this project's asset script as of HEAD" in lines["tests/unit/prepare.py"]
    assert lines["tests/unit/excluded_unit_tests.sh"] == (
        "names tests/unit/algorithms/test_grpo.py of this project 2 times, meaning upstream's: "
        "testharness port-check --fix points these names at the _upstream.py copies"
    )
    assert err == "port-check: 6 replaced, 1 file naming renamed tests (see above)\n"

    assert main(["port-check", "--fix"]) == 0
    out, _ = capsys.readouterr()
    assert [line for line in out.splitlines() if "REPLACED" not in line and "REFERS" not in line] == [
        "port-check: fixed: tests/unit/__init__.py restored from HEAD; the copy is not kept",
        "port-check: fixed: tests/unit/algorithms/__init__.py restored from HEAD; the copy is not kept",
        "port-check: fixed: tests/unit/algorithms/test_grpo.py restored from HEAD; the copy is now "
        "tests/unit/algorithms/test_grpo_upstream.py",
        "port-check: fixed: tests/unit/conftest.py restored from HEAD; the copy is now tests/unit/conftest_upstream.py",
        "port-check: fixed: tests/unit/helpers.py restored from HEAD; the copy is now tests/unit/helpers_upstream.py",
        "port-check: fixed: tests/unit/prepare.py restored from HEAD; the copy is now tests/unit/prepare_upstream.py",
        "port-check: fixed: tests/unit/excluded_unit_tests.sh: 2 names of 1 renamed test file now point at the "
        "_upstream.py copies",
        "port-check: no file of this project is in the way or replaced",
    ]
    assert git(whole, "status", "--porcelain", "--untracked-files=no") == ""  # every file of ours as committed
    assert (unit / "conftest_upstream.py").read_bytes() == UPSTREAM_CONFTEST
    assert (unit / "excluded_unit_tests.sh").read_text() == L0_EXCLUDED.replace("test_grpo.py", "test_grpo_upstream.py")
    assert main(["port-check"]) == 0


def test_names_left_pointing_at_our_file_after_a_rename_are_found(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The copy already beside ours (an earlier --fix, or by hand), the script as upstream wrote it."""
    unit = project / "tests" / "unit"
    (unit / "algorithms" / "test_grpo_upstream.py").write_bytes(THEIRS)
    script = unit / "L0_Unit_Tests_Algorithms.sh"
    script.write_text("bash tests/run_unit.sh unit/algorithms/ --deselect unit/algorithms/test_grpo.py::test_x\n")
    script.chmod(0o755)
    assert main(["port-check"]) == 1
    assert capsys.readouterr().out.startswith(
        "port-check: REFERS: tests/unit/L0_Unit_Tests_Algorithms.sh names tests/unit/algorithms/test_grpo.py"
    )
    assert main(["port-check", "--fix"]) == 0
    assert script.read_text() == (
        "bash tests/run_unit.sh unit/algorithms/ --deselect unit/algorithms/test_grpo_upstream.py::test_x\n"
    )
    assert script.stat().st_mode & 0o777 == 0o755  # still executable


def test_a_copy_that_cannot_be_kept_leaves_ours_and_the_names_alone(
    whole: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    unit = whole / "tests" / "unit"
    _copy_upstream_tree(whole)
    (unit / "algorithms" / "test_grpo_upstream.py").write_text("def test_something_else():\n    pass\n")
    assert main(["port-check", "--fix"]) == 1
    out, err = capsys.readouterr()
    assert not [line for line in out.splitlines() if "excluded_unit_tests.sh" in line and "REFERS" not in line]
    assert err.splitlines() == [
        "port-check: not fixed: tests/unit/algorithms/test_grpo.py: tests/unit/algorithms/test_grpo_upstream.py "
        "exists already; move the copy yourself",
        "port-check: 1 replaced (see above)",
    ]
    assert (unit / "algorithms" / "test_grpo.py").read_bytes() == THEIRS
    assert (unit / "excluded_unit_tests.sh").read_text() == L0_EXCLUDED  # they still mean the file there
