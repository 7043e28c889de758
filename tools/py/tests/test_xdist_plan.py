"""Plan first (testharness.xdist_plan): the files a run will take tests from, and the workers
they can use. The whole path (real pytest-xdist, real testmon): test_parallel_plan.py."""

from __future__ import annotations

from pathlib import Path

from testharness.selection import module_marks
from testharness.xdist_plan import files_to_run, workers_for

PATTERNS = ["test_*.py", "*_test.py"]
NORECURSE = [".*", "build", "venv"]


def _tree(root: Path) -> None:
    for name in ["tests/test_a.py", "tests/sub/test_b.py", "tests/sub/helpers.py", "tests/c_test.py",
                 "tests/.hidden/test_h.py", "tests/build/test_built.py", "other/test_o.py"]:  # fmt: skip
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text("def test(): pass\n")


def test_files_under_the_paths_minus_the_ones_testmon_skips(tmp_path: Path) -> None:
    _tree(tmp_path)
    every = files_to_run(["tests"], tmp_path, tmp_path, PATTERNS, NORECURSE)
    assert every == {"tests/test_a.py", "tests/sub/test_b.py", "tests/c_test.py"}
    left = files_to_run(
        ["tests"], tmp_path, tmp_path, PATTERNS, NORECURSE, skipped=["tests/test_a.py", "tests/c_test.py"]
    )
    assert left == {"tests/sub/test_b.py"}
    assert files_to_run(["tests"], tmp_path, tmp_path, PATTERNS, NORECURSE, skipped=sorted(every)) == set()


def test_node_ids_and_files_count_as_their_file_and_a_missing_path_means_no_plan(tmp_path: Path) -> None:
    _tree(tmp_path)
    (tmp_path / "tests" / "conftest_like.py").write_text("")
    args = ["tests/test_a.py::test", "tests/conftest_like.py", "other"]
    assert files_to_run(args, tmp_path, tmp_path, PATTERNS, NORECURSE) == {
        "tests/test_a.py", "tests/conftest_like.py", "other/test_o.py"}  # fmt: skip
    assert files_to_run(["tests/nope.py"], tmp_path, tmp_path, PATTERNS, NORECURSE) is None
    # run from a sub-directory: paths are the invocation's, keys the rootdir's
    assert files_to_run(["sub"], tmp_path / "tests", tmp_path, PATTERNS, NORECURSE) == {"tests/sub/test_b.py"}


def test_no_more_workers_than_files() -> None:
    assert workers_for(16, 3) == 3
    assert workers_for(2, 30) == 2
    assert workers_for(4, 0) == 0


def test_the_marks_every_test_of_a_module_carries_are_read_without_importing_it() -> None:
    assert module_marks("import pytest\npytestmark = [pytest.mark.mcore, pytest.mark.filterwarnings('x')]\n") == {
        "mcore", "filterwarnings"}  # fmt: skip
    shared = (
        "import pytest\n@pytest.mark.hf_gated('a')\ndef test_a(): ...\n@pytest.mark.hf_gated('b')\ndef test_b(): ...\n"
    )
    assert module_marks(shared) == {"hf_gated"}
    mixed = shared + "def test_c(): ...\n"
    assert module_marks(mixed) == set()  # one test without it: the file is not left out
    cls = "import pytest\n@pytest.mark.mcore\nclass TestX:\n    def test_a(self): ...\n"
    assert module_marks(cls) == {"mcore"}
    assert module_marks("def broken(:\n") == set()
