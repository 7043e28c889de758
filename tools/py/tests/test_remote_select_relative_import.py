"""Modules loaded by a relative name, `importlib.import_module(".x", package="a.b")` or
`import_module(".x", __package__)`, are in the import map (issue 21: they were invisible, so
an edit to one that only a Ray task ran was missed by the harness and by testmon alike).

The three inner runs join one Ray cluster that a helper process holds (`shared_head`, through
RAY_ADDRESS): starting Ray is not what they are about (one start instead of three).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from selection_project import PLUGIN
from xdist_project import Head

from testharness.remote_select.config import SelectConfig
from testharness.remote_select.graph import build_graph
from testharness.remote_select.parsing import parse_refs
from testharness.remote_select.records import FromImportRef, ImportRef
from testharness.remote_select.scan import hash_files, scan_files

pytest_plugins = ["pytester"]

TOOLS_PY = Path(__file__).resolve().parents[3] / "tools" / "py"
# The token of the helper's cluster (xdist_project.shared_head), under the HOME it started in:
# an inner run's HOME is pytester's folder.
RAY_TOKEN = Path.home() / ".ray" / "auth_token"

LIB = {
    "mylib/__init__.py": "",
    "mylib/plugins/__init__.py": "",
    "mylib/plugins/scaler.py": "def scale(x):\n    return x * 2\n",
    "mylib/plugins/offset.py": "def shift(x):\n    return x + 1\n",
    "mylib/plugins/runner.py": """
        import importlib


        def shifted(x):
            return importlib.import_module(".offset", __package__).shift(x)
    """,
    "mylib/plugins/nested/__init__.py": "",
    "mylib/plugins/nested/deep.py": """
        from importlib import import_module


        def scaler():
            return import_module("..scaler", package="mylib.plugins.nested")
    """,
    "mylib/tasks.py": """
        import importlib

        import ray


        @ray.remote
        def scaled(x):
            return importlib.import_module(".scaler", package="mylib.plugins").scale(x)
    """,
    "mylib/shift_tasks.py": """
        import ray


        @ray.remote
        def shifted(x):
            from mylib.plugins import runner

            return runner.shifted(x)
    """,
}


def _write(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        target = root / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(textwrap.dedent(text).lstrip("\n"))


def test_relative_names_with_a_literal_package_or_dunder_package_are_resolved(tmp_path: Path) -> None:
    # (The package literal itself is a dotted string reference too, as any such literal.)
    assert ImportRef("mylib.plugins.scaler") in parse_refs(b'import_module(".scaler", package="mylib.plugins")')
    assert ImportRef("p.q.a.b") in parse_refs(b'importlib.import_module("..a.b", "p.q.r")')
    assert parse_refs(b'importlib.import_module(".offset", __package__)') == (FromImportRef(1, "offset", ()),)
    # Names that cannot be placed stay out (as a computed name always did).
    for source in (b'import_module(".x")', b'import_module(".x", package=pkg)', b'import_module("...x", package="a")'):
        assert not [r for r in parse_refs(source) if isinstance(r, (ImportRef, FromImportRef))]

    _write(tmp_path, LIB)
    cfg = SelectConfig(source_packages=("mylib",), test_roots=("tests",))
    files = scan_files(str(tmp_path), cfg)
    digests = hash_files(files)
    graph = build_graph(cfg, digests, {d: parse_refs(Path(files[r]).read_bytes()) for r, d in digests.items()})

    def closure(rel: str) -> set[str]:
        return set(graph.bits_to_paths(graph.closure_bits(rel)))

    assert "mylib/plugins/scaler.py" in closure("mylib/tasks.py")
    assert "mylib/plugins/offset.py" in closure("mylib/plugins/runner.py")
    assert "mylib/plugins/scaler.py" in closure("mylib/plugins/nested/deep.py")
    assert "mylib/plugins/offset.py" in closure("mylib/shift_tasks.py")
    assert "mylib/plugins/offset.py" not in closure("mylib/tasks.py")


TESTS = {
    "pyproject.toml": """
        [tool.testharness]
        source_packages = ["mylib"]
        test_roots = ["tests"]

        [tool.pytest.ini_options]
        testpaths = ["tests"]
    """,
    "tests/conftest.py": """
        import pytest


        @pytest.fixture(scope="session")
        def ray_session():
            import ray

            ray.init(log_to_driver=False)  # joins RAY_ADDRESS: the cluster the outer test holds
            yield
            ray.shutdown()
    """,
    "tests/test_tasks.py": """
        import ray

        from mylib import shift_tasks, tasks


        def test_scaled(ray_session):
            assert ray.get(tasks.scaled.remote(3)) == 6


        def test_shifted(ray_session):
            assert ray.get(shift_tasks.shifted.remote(3)) == 4
    """,
}
SCALED, SHIFTED = "tests/test_tasks.py::test_scaled", "tests/test_tasks.py::test_shifted"
_LINE = re.compile(r"^(tests/\S+::\S+) (PASSED|FAILED|ERROR)")


def _run(root: Path) -> dict[str, str]:
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "--testmon", "-v", "-p", PLUGIN],
        check=False,
        cwd=root,
        capture_output=True,
        text=True,
        timeout=300,
    )
    ran = dict(m.groups() for m in map(_LINE.match, proc.stdout.splitlines()) if m)
    assert proc.returncode in (0, 1, 5), proc.stdout[-3000:] + proc.stderr[-3000:]
    return ran


def test_an_edit_to_a_module_a_ray_task_loaded_by_relative_name_selects_its_test(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, shared_head: Head
) -> None:
    path = pytester.path
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(path), str(TOOLS_PY), os.environ.get("PYTHONPATH", "")]))
    monkeypatch.setenv("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")  # workers use this interpreter
    # The helper's cluster. A joiner sends Ray's token only when told to (as in
    # xdist_project.env_for), and reads it under its HOME, which pytester moved.
    monkeypatch.setenv("RAY_ADDRESS", shared_head.address)
    monkeypatch.setenv("RAY_AUTH_MODE", "token")
    monkeypatch.setenv("RAY_TMPDIR", shared_head.ray_tmpdir)
    monkeypatch.setenv("RAY_AUTH_TOKEN_PATH", str(RAY_TOKEN))
    _write(path, {**LIB, **TESTS})
    assert _run(path) == {SCALED: "PASSED", SHIFTED: "PASSED"}
    # Same behaviour, new body: only the task ran it, so testmon alone would select nothing.
    scaler = path / "mylib/plugins/scaler.py"
    scaler.write_text(scaler.read_text().replace("return x * 2", "return x + x"))
    assert _run(path) == {SCALED: "PASSED"}
    offset = path / "mylib/plugins/offset.py"
    offset.write_text(offset.read_text().replace("return x + 1", "return x + 2"))  # a real break
    assert _run(path) == {SHIFTED: "FAILED"}
