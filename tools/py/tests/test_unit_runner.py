"""unit_runner's pure parts: upstream-style `unit/...` paths and the requirement check."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

from testharness import requirements
from testharness.settings import MarkerGroup
from testharness.unit_runner import map_upstream_paths

MCORE = MarkerGroup(
    name="mcore", option="--mcore-only", mode="only", requires=("megatron.core",),
    requires_name="megatron-core", hint="uv run --extra mcore ...",
)  # fmt: skip


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    (tmp_path / "tests" / "unit" / "tools").mkdir(parents=True)
    (tmp_path / "tests" / "unit" / "tools" / "test_a.py").write_text("")
    return tmp_path


def test_unit_paths_map_to_the_test_root(tree: Path) -> None:
    roots = [tree / "tests" / "unit"]
    args = ["unit/tools/test_a.py", "unit/tools/test_a.py::test_x[p]", "unit/", "-x"]
    assert map_upstream_paths(args, tree, roots) == [
        "tests/unit/tools/test_a.py", "tests/unit/tools/test_a.py::test_x[p]", "tests/unit", "-x",
    ]  # fmt: skip


def test_paths_that_exist_as_given_or_nowhere_are_kept(tree: Path) -> None:
    roots = [tree / "tests" / "unit"]
    (tree / "unit").mkdir()  # ./unit exists: it is what the user means
    kept = ["unit/", "unit/nope.py", "other/x.py"]
    assert map_upstream_paths(kept, tree, roots) == kept
    (tree / "unit").rmdir()
    # An option's value without a slash is never a candidate (-k unit).
    assert map_upstream_paths(["-k", "unit", "unit/nope.py"], tree, roots) == ["-k", "unit", "unit/nope.py"]


def test_from_the_tests_directory_nothing_changes(tree: Path) -> None:
    cwd = tree / "tests"
    assert map_upstream_paths(["unit/tools/test_a.py"], cwd, [cwd / "unit"]) == ["unit/tools/test_a.py"]


def _probe(missing: str | None) -> requirements.Probe:
    def probe(modules: Sequence[str]) -> str | None:
        return missing

    return probe


def test_a_requirement_is_checked_only_when_its_option_is_given() -> None:
    gone = _probe("No module named 'megatron'")
    assert requirements.first_missing_requirement(["-x"], [MCORE], gone) is None
    assert requirements.first_missing_requirement(["--mcore-only"], [MCORE], _probe(None)) is None
    assert requirements.first_missing_requirement(["--mcore-only"], [MCORE], gone) == (
        "--mcore-only needs megatron-core, which cannot be imported (No module named 'megatron'); "
        "run it as: uv run --extra mcore ..."
    )


def test_spec_error_finds_without_importing() -> None:
    assert requirements.spec_error(["json", "os.path"]) is None
    assert requirements.spec_error(["no_such_module_xyz"]) == "No module named 'no_such_module_xyz'"
    assert requirements.spec_error(["json.no_such_sub"]) == "No module named 'json.no_such_sub'"
    assert requirements.spec_error(["no_such_module_xyz.core"]) == "No module named 'no_such_module_xyz'"
