"""Core of remote-aware selection: config, import graph, state files, engine (no pytest hooks)."""

from __future__ import annotations

import json
import textwrap
from collections.abc import Iterable
from pathlib import Path

import pytest

from testharness.remote_select import parsing, store
from testharness.remote_select.config import SelectConfig, select_config
from testharness.remote_select.engine import RemoteSelector
from testharness.remote_select.graph import build_graph
from testharness.remote_select.parsing import parse_refs
from testharness.remote_select.plan import describe
from testharness.remote_select.records import SentModule, format_ref
from testharness.remote_select.scan import hash_files, scan_files
from testharness.settings import SettingsError, load_settings

CFG = SelectConfig(source_packages=("pkg",), source_roots=("",), test_roots=("tests",))
MAP_NAME, STATE_NAME = ".sel_map.json", ".sel_state.json"  # [tool.testharness] remote_*_file


def _selector(root: Path, cfg: SelectConfig = CFG) -> RemoteSelector:
    return RemoteSelector(root, cfg, store.StateFiles(root / MAP_NAME, root / STATE_NAME))


def _tree(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(textwrap.dedent(text).lstrip("\n"))


def _closure(root: Path, rel: str, cfg: SelectConfig = CFG) -> set[str]:
    files = scan_files(str(root), cfg)
    digests = hash_files(files)
    refs = {d: parse_refs(Path(files[r]).read_bytes()) for r, d in digests.items()}
    g = build_graph(cfg, digests, refs)
    return {p for p in g.bits_to_paths(g.closure_bits(rel)) if p in digests}


BASE = {
    "pkg/__init__.py": "",
    "pkg/a/__init__.py": "from . import b\n",
    "pkg/a/b.py": "from .c import f\nfrom ..util import g\n",
    "pkg/a/c.py": "def f(): pass\n",
    "pkg/util.py": "import pkg.deep.mod\n",
    "pkg/deep/__init__.py": "",
    "pkg/deep/mod.py": "X = 1\n",
    "pkg/actors.py": "class Worker: pass\n",
    "pkg/other.py": "import os\n",
    "pkg/cyc1.py": "from pkg import cyc2\n",
    "pkg/cyc2.py": "from pkg import cyc1\n",
    "conftest.py": "",
    "tests/conftest.py": "",
    "tests/sub/test_x.py": "from pkg import a\n",
    "tests/sub/test_str.py": 'CLS = "pkg.actors.Worker"\nOTHER = "pkg.actors:Worker"\n',
    "tests/sub/test_cyc.py": "import pkg.cyc1\n",
    "tests/sub/helper.py": "import pkg.other\n",
    "tests/sub/test_helper.py": "import helper\n",
}


def test_closure_follows_packages_relative_and_absolute_imports(tmp_path: Path) -> None:
    _tree(tmp_path, BASE)
    got = _closure(tmp_path, "tests/sub/test_x.py")
    assert got == {
        "tests/sub/test_x.py",
        "pkg/__init__.py",
        "pkg/a/__init__.py",  # from pkg import a (a package)
        "pkg/a/b.py",  # from . import b inside a/__init__
        "pkg/a/c.py",  # from .c import f
        "pkg/util.py",  # from ..util import g
        "pkg/deep/__init__.py",  # import pkg.deep.mod: every package on the way
        "pkg/deep/mod.py",
        "conftest.py",  # the conftest chain, root included
        "tests/conftest.py",
    }


def test_dotted_strings_and_cycles_and_sibling_helpers(tmp_path: Path) -> None:
    _tree(tmp_path, BASE)
    assert "pkg/actors.py" in _closure(tmp_path, "tests/sub/test_str.py")
    cyc = _closure(tmp_path, "tests/sub/test_cyc.py")
    assert {"pkg/cyc1.py", "pkg/cyc2.py"} <= cyc
    # `import helper` from a test dir without __init__ (pytest's rootdir insertion)
    assert {"tests/sub/helper.py", "pkg/other.py"} <= _closure(tmp_path, "tests/sub/test_helper.py")


def test_unrelated_modules_are_not_in_the_closure(tmp_path: Path) -> None:
    _tree(tmp_path, BASE)
    got = _closure(tmp_path, "tests/sub/test_x.py")
    assert "pkg/actors.py" not in got and "pkg/other.py" not in got


def test_phantoms_make_deleted_and_created_modules_visible(tmp_path: Path) -> None:
    _tree(tmp_path, {"pkg/__init__.py": "def name(): pass\n", "tests/test_p.py": "from pkg import name\n"})
    files = scan_files(str(tmp_path), CFG)
    digests = hash_files(files)
    refs = {d: parse_refs(Path(files[r]).read_bytes()) for r, d in digests.items()}
    g = build_graph(CFG, digests, refs)
    closure = g.bits_to_paths(g.closure_bits("tests/test_p.py"))
    assert "pkg/name.py" in closure  # would become a module if created
    assert "tests/conftest.py" in closure  # a conftest created later would apply


def test_parse_refs_encoding() -> None:
    src = b"import a.b\nfrom . import c\nfrom ..d import e, f\nX = 'pkg.mod:Cls'\nY = 'examples/run.py'\n"
    # The text form is what map files store: it must not change (or MAP_VERSION must).
    assert _ref_texts(src) == ["i:a.b", "f:1::c", "f:2:d:e,f", "s:pkg.mod.Cls", "p:examples/run.py"]
    assert parse_refs(b"def broken(:\n") == ()


def _ref_texts(source: bytes) -> list[str]:
    return [format_ref(r) for r in parse_refs(source)]


def test_paths_are_repo_relative_posix_and_digests_are_contents(tmp_path: Path) -> None:
    _tree(tmp_path, BASE)
    files = scan_files(str(tmp_path), CFG)
    assert all(not Path(rel).is_absolute() and "\\" not in rel for rel in files)
    before = hash_files(files)
    import os

    for path in files.values():
        os.utime(path, (1, 1))
    assert hash_files(files) == before


def test_rebuild_reparses_only_changed_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _tree(tmp_path, BASE)
    sel = _selector(tmp_path)
    plan = sel.plan()
    sel.finish(plan, {}, {})
    calls: list[bytes] = []
    real = parsing.parse_file

    def counting(source: bytes) -> dict[str, object]:
        calls.append(source)
        return real(source)

    monkeypatch.setattr("testharness.remote_select.parsing.parse_file", counting)
    (tmp_path / "pkg/a/c.py").write_text("def f(): return 1\n")
    (tmp_path / "tests/sub/test_new.py").write_text("import pkg\n")
    sel.plan()
    assert sorted(calls) == [b"def f(): return 1\n", b"import pkg\n"]


def test_engine_selects_by_content_and_records_only_passes(tmp_path: Path) -> None:
    _tree(tmp_path, BASE)
    sel = _selector(tmp_path)
    a, s = "tests/sub/test_x.py::test_a[1-x]", "tests/sub/test_str.py::test_s"
    plan = sel.plan()
    assert plan.must_run(a) and plan.must_run(s)  # never passed
    sel.finish(plan, {a: "passed", s: "passed"}, {"tests/sub/test_x.py": [a], "tests/sub/test_str.py": [s]})
    plan = sel.plan()
    assert not plan.must_run(a) and not plan.must_run(s)
    assert plan.affected_files == {"tests/sub/test_cyc.py", "tests/sub/test_helper.py"}  # never ran

    (tmp_path / "pkg/actors.py").write_text("class Worker:\n    x = 1\n")
    plan = sel.plan()
    assert plan.must_run(s) and not plan.must_run(a)
    assert plan.changed == ["pkg/actors.py"]
    sel.finish(plan, {s: "failed"}, {})
    assert sel.plan().must_run(s)  # a failure keeps the trigger
    sel.finish(sel.plan(), {}, {})  # not run at all: still kept
    plan = sel.plan()
    assert plan.must_run(s)
    sel.finish(plan, {s: "passed"}, {})
    assert not sel.plan().must_run(s)
    state = json.loads((tmp_path / STATE_NAME).read_text())
    assert set(state["tests"]) == {a, s}
    assert len(state["generations"]) == 1  # unchanged tests moved to the new generation


def test_map_lists_graph_and_node_ids(tmp_path: Path) -> None:
    _tree(tmp_path, BASE)
    sel = _selector(tmp_path)
    a = "tests/sub/test_x.py::test_a"
    sel.finish(sel.plan(), {a: "passed"}, {"tests/sub/test_x.py": [a]})
    data = json.loads((tmp_path / MAP_NAME).read_text())
    assert data["tests"]["tests/sub/test_x.py"]["nodeids"] == [a]
    assert "pkg/deep/mod.py" in data["deps"]["pkg/util.py"]
    text = json.dumps(data)
    assert str(tmp_path) not in text


def test_explain_cli_prints_a_closure(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from testharness.remote_select.__main__ import main

    _tree(tmp_path, BASE)
    (tmp_path / "pyproject.toml").write_text(
        "[tool.testharness]\nsource_packages = ['pkg']\ntest_roots = ['tests']\n"
        f"remote_map_file = '{MAP_NAME}'\nremote_state_file = '{STATE_NAME}'\n"
    )
    monkeypatch.chdir(tmp_path)
    sel = _selector(tmp_path)
    a, b, c = (f"tests/sub/test_x.py::{name}" for name in ("test_a", "test_b", "test_c"))
    sel.finish(sel.plan(), dict.fromkeys((a, b, c), "passed"), {}, {a: ["pkg/actors.py"], b: [], c: None})
    assert main(["tests/sub/test_x.py"]) == 0
    out = capsys.readouterr().out
    assert "  pkg/deep/mod.py" in out
    assert "  test_a: pkg/actors.py\n" in out
    assert "  test_b: nothing sent to Ray workers\n" in out
    assert "  test_c: unknown" in out
    assert main(["nope.py"]) == 2


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[tool.testharness]\nsource_packages = 3\n", "source_packages must be a list of strings"),
        ("[tool.testharness]\nsource_packages = ['a-b']\n", "is not a top-level package name"),
        ("[tool.testharness]\nsource_packages = ['a']\nsource_roots = ['/abs']\n", "must be a path inside"),
        ("[tool.testharness\n", "cannot parse"),
    ],
)
def test_config_errors_are_one_line(tmp_path: Path, text: str, message: str) -> None:
    (tmp_path / "pyproject.toml").write_text(text)
    with pytest.raises(SettingsError, match=message) as info:
        load_settings(tmp_path)
    assert "\n" not in str(info.value)


def test_config_defaults_and_fallbacks(tmp_path: Path) -> None:
    assert select_config(load_settings(tmp_path)).source_packages == ()
    assert select_config(load_settings(tmp_path)).test_roots == ("tests",)  # settings.DEFAULT_TEST_ROOTS
    (tmp_path / "pyproject.toml").write_text(
        "[tool.testharness]\nsource_packages = ['pkg']\n[tool.pytest.ini_options]\ntestpaths = ['tests/unit']\n"
    )
    cfg = select_config(load_settings(tmp_path))
    assert cfg.source_packages == ("pkg",)
    assert cfg.source_roots == ("",) and cfg.test_roots == ("tests/unit",)  # pytest's testpaths
    (tmp_path / "pyproject.toml").write_text(
        "[tool.testharness]\nsource_packages = ['x']\nsource_roots = ['src']\ntest_roots = ['t']\n"
        "[tool.pytest.ini_options]\ntestpaths = ['ignored']\n"
    )
    cfg = select_config(load_settings(tmp_path))
    assert cfg.source_roots == ("src",) and cfg.test_roots == ("t",)


# -- import-time digests (import_time.py) -----------------------------------------------
def _import_digests(sources: dict[str, str]) -> dict[str, str]:
    from testharness.remote_select.import_time import import_digests

    return import_digests(
        {rel: parsing.parse_file(textwrap.dedent(src).encode()).facts for rel, src in sources.items()}
    )


LIB = {
    "lib.py": """
        import os

        LIMIT = 3


        def table():
            return {"a": 1}


        REGISTRY = table()  # runs at import time


        class Worker:
            scale = 2

            def __init__(self):
                self.n = 0

            def step(self, x):
                return x * self.scale


        class Registry:
            def __init__(self):
                self.items = register("w")


        def register(name):
            return [name]


        DEFAULT = Registry()  # a constructor run at import time, and what it calls


        def __getattr__(name):  # PEP 562: Python calls it by itself
            return name
    """,
    "tests/conftest.py": """
        import pytest


        @pytest.fixture(scope="module")
        def worker():
            return build(1)


        def build(x):
            return x


        def pytest_configure(config):
            config.x = 1


        def helper():
            return 2
    """,
}


@pytest.mark.parametrize(
    ("rel", "old", "new", "import_time"),
    [
        ("lib.py", "return x * self.scale", "return x + x", False),  # a method body: call time
        ("lib.py", "import os\n", "import os  # a comment\n", False),  # comments are not code
        ("lib.py", "LIMIT = 3", "LIMIT = 4", True),  # module level
        ("lib.py", "scale = 2", "scale = 3", True),  # class body
        ("lib.py", "def step(self, x):", "def step(self, x, y=1):", True),  # a signature (defaults run at import)
        ("lib.py", 'return {"a": 1}', 'return {"a": 2}', True),  # called at module level
        ("lib.py", "self.n = 0", "self.n = 1", False),  # a constructor nobody calls at import
        ("lib.py", "self.items = register", "self.items = 2 * register", True),  # one called at import
        ("lib.py", "return [name]", "return [name, name]", True),  # called by that constructor
        ("lib.py", "return name\n", "return name * 2\n", True),  # module __getattr__ runs by itself
        ("tests/conftest.py", "return build(1)", "return build(2)", True),  # a fixture: shared set-up
        ("tests/conftest.py", "return x", "return x + 1", False),  # what it calls runs in a test
        ("tests/conftest.py", "config.x = 1", "config.x = 2", True),  # a pytest hook
        ("tests/conftest.py", "return 2", "return 3", False),  # a plain helper: testmon's
    ],
    ids=[
        "method-body",
        "comment",
        "constant",
        "class-attr",
        "signature",
        "called-at-import",
        "unused-constructor",
        "constructor-at-import",
        "callee-of-constructor",
        "module-getattr",
        "fixture",
        "fixture-callee",
        "hook",
        "helper-body",
    ],
)
def test_import_digest_changes_only_for_import_time_code(rel: str, old: str, new: str, import_time: bool) -> None:
    before = _import_digests(LIB)
    edited = dict(LIB)
    assert old in edited[rel]
    edited[rel] = edited[rel].replace(old, new)
    after = _import_digests(edited)
    assert (before[rel] != after[rel]) is import_time
    assert all(before[r] == after[r] for r in LIB if r != rel)


def test_import_time_calls_are_followed_across_files_and_functions() -> None:
    sources = {
        "a.py": "from b import build\n\nTABLE = build()\n",
        "b.py": "def build():\n    return make(1)\n\n\ndef make(x):\n    return [x]\n\n\ndef unused():\n    return 0\n",
        "c.py": "from d import tag\n\n\n@tag\ndef f():\n    return 0\n",
        "d.py": "def tag(fn):\n    return fn\n",
        "e.py": "def norm(x):\n    return x\n\n\nVALUES = list(map(norm, [1]))\n",
    }
    before = _import_digests(sources)
    for rel, old, new, changes in (
        ("b.py", "return [x]", "return [x, x]", True),  # called by a function called at import
        ("b.py", "return 0", "return 1", False),
        ("d.py", "return fn", "return None or fn", True),  # a decorator runs at import
        ("c.py", "return 0", "return 1", False),  # the decorated function does not
        ("e.py", "return x", "return -x", True),  # a function passed to a call at import
    ):
        after = _import_digests({**sources, rel: sources[rel].replace(old, new)})
        assert (after[rel] != before[rel]) is changes, old


def test_a_file_that_does_not_parse_counts_whole() -> None:
    before = _import_digests({"x.py": "def f(:\n    return 1\n"})
    after = _import_digests({"x.py": "def f(:\n    return 2\n"})
    assert before != after


def selected_after(sel: RemoteSelector, root: Path, nodeids: Iterable[str], rel: str, old: str, new: str) -> set[str]:
    """The tests a plan must run once `old` becomes `new` in `rel` (the file is restored after)."""
    path = root / rel
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new, 1))
    plan = sel.plan()
    path.write_text(text)
    return {n for n in nodeids if plan.must_run(n)}


def test_engine_uses_the_recorded_reach_for_body_edits_and_the_static_closure_for_import_time(tmp_path: Path) -> None:
    tree = dict(BASE)
    tree["pkg/a/c.py"] = "def f():\n    return 1\n"
    tree["pkg/deep/mod.py"] = "X = 1\n\n\ndef g():\n    return 1\n"
    _tree(tmp_path, tree)
    sel = _selector(tmp_path)
    # All three import pkg.a (closure: a/b.py, a/c.py, util.py, deep/mod.py).
    local, remote, opaque = (
        "tests/sub/test_x.py::test_local",
        "tests/sub/test_x.py::test_remote",
        "tests/sub/test_x.py::test_opaque",
    )
    outcomes = {local: "passed", remote: "passed", opaque: "passed"}
    reaches: dict[str, list[str] | None] = {local: [], remote: ["pkg/deep/mod.py"], opaque: None}
    sel.finish(sel.plan(), outcomes, {"tests/sub/test_x.py": sorted(outcomes)}, reaches)
    state = json.loads((tmp_path / STATE_NAME).read_text())
    assert set(state["reach"]) == {local, remote}  # opaque: no reach, static closure

    # A body edit in a file the test sent to a worker: remote (and opaque) tests.
    assert selected_after(sel, tmp_path, outcomes, "pkg/deep/mod.py", "return 1", "return 2") == {remote, opaque}
    # A body edit the remote test's reach does not include: only the opaque one (testmon
    # decides for code run in the pytest process).
    assert selected_after(sel, tmp_path, outcomes, "pkg/a/c.py", "return 1", "return 2") == {opaque}
    # Import-time code in the static closure: everyone.
    assert selected_after(sel, tmp_path, outcomes, "pkg/deep/mod.py", "X = 1", "X = 2") == set(outcomes)
    # A reached file that disappeared: the remote test must run.
    (tmp_path / "pkg/deep/mod.py").unlink()
    assert {remote, opaque} <= {n for n in outcomes if sel.plan().must_run(n)}


def test_engine_counts_only_the_functions_a_traced_actor_ran(tmp_path: Path) -> None:
    tree = dict(BASE)
    tree["pkg/deep/mod.py"] = (
        "X = 1\n\n\nclass W:\n    def ran(self):\n        return 1\n\n    def idle(self):\n        return 1\n"
    )
    tree["pkg/worker.py"] = "from pkg.deep.mod import W\n"
    _tree(tmp_path, tree)
    sel = _selector(tmp_path)
    traced, plain = "tests/sub/test_x.py::test_traced", "tests/sub/test_x.py::test_plain"
    outcomes = {traced: "passed", plain: "passed"}
    reaches: dict[str, list[str] | None] = {
        traced: ["@pkg/worker.py", "pkg/deep/mod.py::W.ran", "pkg/deep/mod.py::<module>"],
        plain: [],
    }
    sel.finish(sel.plan(), outcomes, {"tests/sub/test_x.py": sorted(outcomes)}, reaches)
    state = json.loads((tmp_path / STATE_NAME).read_text())
    stored = state["reach_lists"][state["reach"][traced]]
    assert stored[0] == "@pkg/worker.py" and stored[1] == "pkg/deep/mod.py::<module>#-"
    assert stored[2].startswith("pkg/deep/mod.py::W.ran#") and len(stored[2]) > len("pkg/deep/mod.py::W.ran#")

    # The body of the function the actor ran: the traced test; the other function of the
    # same file: nobody (testmon decides for code run in the pytest process).
    assert selected_after(
        sel,
        tmp_path,
        outcomes,
        "pkg/deep/mod.py",
        "    def ran(self):\n        return 1",
        "    def ran(self):\n        return 2",
    ) == {traced}
    assert (
        selected_after(
            sel,
            tmp_path,
            outcomes,
            "pkg/deep/mod.py",
            "    def idle(self):\n        return 1",
            "    def idle(self):\n        return 2",
        )
        == set()
    )
    # Import-time code of a file the actor imported: everyone whose closure holds it.
    assert selected_after(sel, tmp_path, outcomes, "pkg/deep/mod.py", "X = 1", "X = 2") == {traced, plain}
    # A file a function it ran lived in is gone: the traced test must show what that does.
    (tmp_path / "pkg/deep/mod.py").unlink()
    assert traced in {n for n in outcomes if sel.plan().must_run(n)}


def test_imports_only_type_checkers_read_are_not_in_the_closure() -> None:
    refs = _ref_texts(
        b"from typing import TYPE_CHECKING\nimport typing\n"
        b"if TYPE_CHECKING:\n    from pkg.heavy import Model\nelse:\n    import pkg.light\n"
        b"if typing.TYPE_CHECKING:\n    import pkg.other\n"
        b"def f():\n    from pkg.lazy import g\n"
    )
    assert "f:0:pkg.heavy:Model" not in refs and "i:pkg.other" not in refs
    assert "i:pkg.light" in refs and "f:0:pkg.lazy:g" in refs  # an import in a function body runs when called


# -- damaged state files and concurrent sessions ----------------------------------------------
def _seeded_selector(
    root: Path,
) -> tuple[RemoteSelector, dict[str, str], dict[str, list[str]], dict[str, list[str] | None]]:
    """A tree whose map and state files exist, with reaches of every kind recorded."""
    tree = dict(BASE)
    tree["pkg/deep/mod.py"] = "X = 1\n\n\nclass W:\n    def ran(self):\n        return 1\n"
    _tree(root, tree)
    sel = _selector(root)
    a, b, c = "tests/sub/test_x.py::test_a", "tests/sub/test_x.py::test_b", "tests/sub/test_str.py::test_s"
    outcomes = {a: "passed", b: "passed", c: "passed"}
    collected = {"tests/sub/test_x.py": [a, b], "tests/sub/test_str.py": [c]}
    reaches: dict[str, list[str] | None] = {
        a: ["pkg/actors.py"],
        b: ["@pkg/util.py", "pkg/deep/mod.py::W.ran"],
        c: None,
    }
    sel.finish(sel.plan(), outcomes, collected, reaches)
    return sel, outcomes, collected, reaches


def _locations(value: object, path: tuple[object, ...] = ()) -> list[tuple[object, ...]]:
    """Every place inside a JSON document (of a big mapping, keyed by data, the first two
    keys; of a list, the first item: the others have the same shape)."""
    out = [path] if path else []
    if isinstance(value, dict):
        for key in sorted(value) if len(value) <= 8 else sorted(value)[:2]:
            out += _locations(value[key], (*path, key))
    elif isinstance(value, list) and value:
        out += _locations(value[0], (*path, 0))
    return out


def _replaced(doc: object, path: tuple[object, ...], new: object) -> object:
    doc = json.loads(json.dumps(doc))
    target = doc
    for key in path[:-1]:
        target = target[key]  # type: ignore[index]
    target[path[-1]] = new  # type: ignore[index]
    return doc


WRONG = [None, 7, "x", [], {}, [7], {"k": 7}, [[7, 7, 7, 7]]]


@pytest.mark.parametrize("name", [STATE_NAME, MAP_NAME])
def test_wrong_types_deep_inside_never_raise(tmp_path: Path, name: str) -> None:
    sel, outcomes, collected, reaches = _seeded_selector(tmp_path)
    path = tmp_path / name
    good = json.loads(path.read_text())
    (tmp_path / "pkg/actors.py").write_text("class Worker:\n    y = 2\n")  # so plans look inside
    tried = 0
    for where in _locations(good):
        for new in WRONG:
            path.write_text(json.dumps(_replaced(good, where, new)))
            try:
                plan = sel.plan()
                assert len(plan.messages) <= 1, plan.messages
                sel.finish(plan, outcomes, collected, reaches)
                sel.plan()
            except Exception as exc:  # the report names the place
                raise AssertionError(f"{name} with {new!r} at {'/'.join(map(str, where))}: {exc!r}") from exc
            tried += 1
    assert tried > 100


@pytest.mark.parametrize("what", ["directory", "binary", "empty"])
def test_state_file_that_is_not_json_text_is_replaced_with_one_warning(tmp_path: Path, what: str) -> None:
    sel, outcomes, collected, reaches = _seeded_selector(tmp_path)
    for name in (STATE_NAME, MAP_NAME):
        path = tmp_path / name
        path.unlink()
        if what == "directory":
            path.mkdir()
            (path / "inside.json").write_text("{}")
        elif what == "binary":
            path.write_bytes(b"\x00\xff\xfe garbage \x80")
        else:
            path.write_bytes(b"")
    plan = sel.plan()
    assert len(plan.messages) == 2 and all("\n" not in m for m in plan.messages), plan.messages
    assert all(m.startswith((STATE_NAME, MAP_NAME)) for m in plan.messages)
    if what == "directory":
        assert all("is a directory; moved it to " in m for m in plan.messages)
        aside = sorted(p.name for p in tmp_path.iterdir() if ".corrupt-" in p.name)
        assert [n.split(".corrupt-")[0] for n in aside] == sorted([MAP_NAME, STATE_NAME])
        assert all((tmp_path / n / "inside.json").is_file() for n in aside)  # nothing lost
    assert all(plan.must_run(n) for n in outcomes)  # as on a first run
    sel.finish(plan, outcomes, collected, reaches)
    plan = sel.plan()
    assert plan.messages == [] and not any(plan.must_run(n) for n in outcomes)


@pytest.mark.parametrize("name", [MAP_NAME, STATE_NAME])
def test_one_file_it_cannot_use_plans_as_a_first_run(tmp_path: Path, name: str) -> None:
    """The map alone damaged (the state intact) is enough: nothing it narrowed is trusted."""
    sel, outcomes, collected, reaches = _seeded_selector(tmp_path)
    (tmp_path / name).write_text("[" * 100_000 + "]" * 100_000)
    plan = sel.plan()
    assert len(plan.messages) == 1 and plan.messages[0].startswith(f"{name} is corrupted (JSON nested too deep); ")
    assert all(plan.must_run(n) for n in outcomes)
    assert plan.affected_files >= set(collected)
    assert (
        describe(plan)
        == "remote-select: every test is selected: its files could not be used (rebuilt when this run ends)"
    )
    sel.finish(plan, outcomes, collected, reaches)
    plan = sel.plan()
    assert plan.messages == [] and not any(plan.must_run(n) for n in outcomes)


def test_a_damaged_parse_cache_is_read_again_and_rebuilt(tmp_path: Path) -> None:
    sel, outcomes, collected, reaches = _seeded_selector(tmp_path)
    cache = store.parse_cache_file(tmp_path / MAP_NAME)
    assert cache.is_file()
    cache.write_text("[" * 100_000 + "]" * 100_000)
    (tmp_path / "pkg/actors.py").write_text("class Worker:\n    y = 2\n")  # so the plan reads the cache
    plan = sel.plan()
    assert len(plan.messages) == 1 and plan.messages[0].startswith(
        f"{cache.name} is corrupted (JSON nested too deep); "
    )
    assert [p.name.split(".corrupt-")[0] for p in tmp_path.iterdir() if ".corrupt-" in p.name] == [cache.name]
    assert sel.finish(plan, outcomes, collected, reaches) == []  # shown once, at plan time
    assert json.loads(cache.read_text())["format"] == store.PARSE_CACHE_FORMAT  # rebuilt


def test_merge3_takes_ours_for_mine_else_whoever_changed_it() -> None:
    base = {"kept": 1, "we_changed": 1, "they_changed": 1, "both": 1, "we_deleted": 1, "they_deleted": 1}
    ours = {"kept": 1, "we_changed": 2, "they_changed": 1, "both": 2, "they_deleted": 1, "we_added": 2}
    theirs = {"kept": 1, "we_changed": 1, "they_changed": 3, "both": 3, "we_deleted": 1, "they_added": 3}
    assert store.merge3(base, ours, theirs, mine=set()) == {
        "kept": 1,
        "we_changed": 2,
        "they_changed": 3,
        "both": 3,  # changed by both and not ours to decide: theirs (saved after we loaded)
        "we_added": 2,
        "they_added": 3,
    }
    # Keys this session decided (the tests it ran) are ours, deletions included.
    assert store.merge3(base, ours, theirs, mine={"both", "they_changed", "we_deleted"}) == {
        "kept": 1,
        "we_changed": 2,
        "they_changed": 1,
        "both": 2,
        "we_added": 2,
        "they_added": 3,
    }
    # Nobody else saved meanwhile: the result is exactly ours.
    assert store.merge3(base, ours, base, mine={"both"}) == ours


def _state(tests: dict[str, str], reaches: dict[str, tuple[str, ...]] | None = None) -> store.State:
    gens = {gid: {"f.py": gid} for gid in set(tests.values())}
    return store.State(gens, dict(tests), reaches or {}, {gid: {"f.py": "i" + gid} for gid in gens})


def test_merge_state_keeps_both_sessions_records() -> None:
    base = _state({"t::a": "g0", "t::b": "g0", "t::c": "g0"})
    # Session A ran a (passed: g1) and c (failed: keeps g0); refreshed b, which it did not run.
    ours = _state({"t::a": "g1", "t::b": "g1", "t::c": "g0"}, {"t::a": ("x.py",)})
    # Session B, saved in between, ran b and c (both passed at g2) and a new test d.
    theirs = _state({"t::a": "g0", "t::b": "g2", "t::c": "g2", "t::d": "g2"}, {"t::b": ("y.py",)})
    merged = store.merge_state(base, ours, theirs, ran={"t::a", "t::c"})
    assert merged.tests == {"t::a": "g1", "t::b": "g2", "t::c": "g0", "t::d": "g2"}
    assert merged.reaches == {"t::a": ("x.py",), "t::b": ("y.py",)}
    assert set(merged.generations) == set(merged.imports) == {"g0", "g1", "g2"}
    assert merged.generations["g2"] == {"f.py": "g2"}
    # Alone (nothing saved since it loaded), a session's state is kept as it is.
    alone = store.merge_state(base, ours, base, ran={"t::a", "t::c"})
    assert (alone.tests, alone.reaches, alone.generations) == (ours.tests, ours.reaches, ours.generations)


def test_merge_map_tests_keeps_both_sessions_collections() -> None:
    base = {"tests/a.py": {"nodeids": ["a1"]}, "tests/b.py": {"nodeids": ["b1"]}}
    ours = {"tests/a.py": {"nodeids": ["a1", "a2"]}, "tests/b.py": {"nodeids": ["b1"]}}
    theirs = {"tests/a.py": {"nodeids": ["a1"]}, "tests/b.py": {"nodeids": ["b1", "b2"]}, "tests/c.py": {"nodeids": []}}
    assert store.merge_map_tests(base, ours, theirs, collected={"tests/a.py"}) == {
        "tests/a.py": {"nodeids": ["a1", "a2"]},
        "tests/b.py": {"nodeids": ["b1", "b2"]},
        "tests/c.py": {"nodeids": []},
    }


def test_sessions_finishing_in_turn_lose_nothing(tmp_path: Path) -> None:
    """Two sessions plan on the same files, then each saves: the second merges onto the first."""
    _tree(tmp_path, BASE)
    x, s = "tests/sub/test_x.py::test_a", "tests/sub/test_str.py::test_s"
    first, second = _selector(tmp_path), _selector(tmp_path)
    plan_1, plan_2 = first.plan(), second.plan()
    first.finish(plan_1, {x: "passed"}, {"tests/sub/test_x.py": [x]}, {x: ["pkg/actors.py"]})
    second.finish(plan_2, {s: "passed"}, {"tests/sub/test_str.py": [s]}, {s: []})
    plan = first.plan()
    assert not plan.must_run(x) and not plan.must_run(s)
    assert plan.reaches == {x: (SentModule("pkg/actors.py"),), s: ()}
    data = json.loads((tmp_path / MAP_NAME).read_text())
    assert data["tests"]["tests/sub/test_x.py"]["nodeids"] == [x]
    assert data["tests"]["tests/sub/test_str.py"]["nodeids"] == [s]
    # A session's outcome decides for the tests it ran: a failure saved after another
    # session's pass keeps the test selected.
    (tmp_path / "pkg/a/c.py").write_text("def f(): pass\nY = 2\n")  # import-time code
    plan_1, plan_2 = first.plan(), second.plan()
    assert plan_1.must_run(x) and plan_2.must_run(x)
    second.finish(plan_2, {x: "passed"}, {})
    first.finish(plan_1, {x: "failed"}, {})
    assert first.plan().must_run(x)
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".lock")] == []
