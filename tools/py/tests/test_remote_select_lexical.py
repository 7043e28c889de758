"""lexical.py (reading files without `ast`) against parsing.parse_file_ast: never less than it.

Pure core: no pytest plugin, no Ray. bench/selection_map.py times both on large trees.
"""

from __future__ import annotations

import ast
import importlib
import os
import re
import textwrap
from pathlib import Path
from typing import Any

import pytest

from testharness.remote_select import lexical, masked_text, parsing
from testharness.remote_select.import_time import file_facts
from testharness.remote_select.parsing import parse_file_ast
from testharness.remote_select.records import ALWAYS, CALL_TIME, OWN_BODY, DottedString, ImportRef, ParsedFile
from testharness.remote_select.scan import hash_files

ROOT = Path(__file__).resolve().parents[3]


def _read(src: str) -> ParsedFile:
    parsed = lexical.read(textwrap.dedent(src).encode())
    assert parsed is not None
    return parsed


def _merged(parsed: ParsedFile) -> dict[str, tuple[set[str], int]]:
    out: dict[str, tuple[set[str], int]] = {}
    for fn in parsed.facts.funcs:  # a name defined twice (if/else): both count
        calls, kind = out.get(fn.qualname, (set(), CALL_TIME))
        out[fn.qualname] = (calls | set(fn.calls), max(kind, fn.kind))
    return out


def test_on_this_repository_it_finds_everything_ast_finds() -> None:
    files = [p for d in ("nemo_rl", "tools/py/testharness") for p in sorted((ROOT / d).rglob("*.py"))]
    assert len(files) > 50
    for path in files:
        source = path.read_bytes()
        fast = lexical.read(source)
        assert fast is not None, path
        ref = parse_file_ast(source)
        assert set(ref.refs) <= set(fast.refs), path
        want, got = _merged(ref), _merged(fast)
        assert sorted(want) == sorted(got), path
        for name, (calls, kind) in want.items():
            assert calls <= got[name][0], (path, name)
            assert got[name][1] == kind or (kind == CALL_TIME and got[name][1] in (ALWAYS, OWN_BODY)), (path, name)
        assert set(ref.facts.top) <= set(fast.facts.top), path


def test_references_as_ast_sees_them() -> None:
    parsed = _read(
        '''
        """A docstring naming pkg.in_doc, and: import not_an_import"""
        from typing import TYPE_CHECKING
        import a.b as c, d  # import commented.out
        from .e import (f,
            g as h)
        if TYPE_CHECKING:
            import only.for_types
            X = "pkg.typed"
        else:
            import at.runtime
        NAME = ("pkg."
                "joined")
        F = f"pkg.fmt{1}"
        B = b"pkg.bytes"
        def lazy():
            import inside.function; import after.semicolon
        '''
    )
    texts = {str(r) for r in parsed.refs}
    imports = [r.module for r in parsed.refs if isinstance(r, ImportRef)]
    assert imports == ["a.b", "d", "at.runtime", "inside.function", "after.semicolon"]  # in the file's order
    assert DottedString("pkg.joined") in parsed.refs and DottedString("pkg.fmt") in parsed.refs
    assert not any("only.for_types" in t or "pkg.typed" in t or "bytes" in t or "commented" in t for t in texts)
    assert not any("not_an_import" in t for t in texts)


def test_functions_calls_and_kinds() -> None:
    parsed = _read(
        '''
        import pytest

        def outer(
            a,
            b=make_default(),
        ) -> dict[str, int]:
            """def not_a_function(): in a docstring"""
            def inner():
                return helper(a)
            return f"{formatted(b)}"


        class Base:
            pass


        class Worker(Base, metaclass=Meta):
            @property
            def size(self): return compute(1)

            async def run(self):
                await go(callback, key=other)


        @pytest.fixture(
            scope="module",
        )
        def worker_fixture():
            return Worker()


        @pytest.mark.parametrize("where", ["in_fixture"])
        def test_x(where):
            pass


        def pytest_configure(config):
            pass

        VALUE = outer(1)
        '''
    )
    funcs = {fn.qualname: fn for fn in parsed.facts.funcs}
    assert sorted(funcs) == ["Worker.run", "Worker.size", "outer", "pytest_configure", "test_x", "worker_fixture"]
    assert {"helper", "formatted"} <= set(funcs["outer"].calls)
    assert {"go", "callback", "other"} <= set(funcs["Worker.run"].calls)
    assert funcs["worker_fixture"].kind == OWN_BODY
    assert funcs["test_x"].kind == OWN_BODY  # as ast.unparse reads the decorator: "fixture" in a string
    assert funcs["pytest_configure"].kind == ALWAYS and funcs["outer"].kind == CALL_TIME
    top = set(parsed.facts.top)
    assert {"outer", "make_default", "property", "fixture", "parametrize"} <= top
    assert not {"Base", "Meta", "not_a_function", "inner"} & top  # base classes are no calls


# Python 3.11.0-3.11.4 (and Debian 12's 3.11.2 up to +deb12u8) match a possessive repeat of a
# group wrongly (gh-100061, gh-106052): after an iteration fails part-way, matching goes on from
# where it failed. `@[ \n]*+(?:\w++[ \n]*+\.[ \n]*+)*+(\w++)` read `@property` and a new line
# as no name at all: the decorator was lost from the import-time calls, so an edit to what it
# runs at import changed no digest. The first test fails there only; the second everywhere.
@pytest.mark.parametrize(
    ("text", "names"),
    [
        ("@property\ndef f():\n    pass\n", ["property"]),  # the minimal file that lost its name
        ("@a.b\ndef f(): pass\n", ["b"]),
        ("@ a . b . c(1)\ndef f(): pass\n", ["c"]),
        ("y = x @ z\n", ["z"]),  # matrix multiplication: a name more (a superset)
        ("y = x @ (z)\n", []),
        ("@a.b.\n", []),  # as a possessive group reads it: no iteration given back
    ],
)
def test_decorator_names(text: str, names: list[str]) -> None:
    assert masked_text._DECORATOR.findall(text) == names
    if text.startswith("@property"):
        ref = parse_file_ast(text.encode()).facts.top
        assert set(ref) == {"property"} and set(_read(text).facts.top) == {"property"}


def _repeated_groups(pattern: str) -> list[str]:
    """The possessive repeats and atomic groups of more than one character in `pattern`, read
    with re's own parser (private, the same from 3.11 to 3.14; no stubs: imported by name)."""
    c = importlib.import_module("re._constants")
    p = importlib.import_module("re._parser")
    one_char = {c.LITERAL, c.NOT_LITERAL, c.ANY, c.IN}  # what re compiles to POSSESSIVE_REPEAT_ONE

    def single(sub: Any) -> bool:
        if len(sub) != 1:
            return False
        op, av = sub[0]
        return single(av[-1]) if op is c.SUBPATTERN and av[0] is None else op in one_char

    found: list[str] = []

    def walk(sub: Any) -> None:
        for op, av in sub:
            if op is c.ATOMIC_GROUP or (op is c.POSSESSIVE_REPEAT and not single(av[2])):
                found.append(str(op))
            stack: list[Any] = [av]
            while stack:
                x = stack.pop()
                if isinstance(x, p.SubPattern):
                    walk(x)
                elif isinstance(x, (tuple, list)):
                    stack.extend(x)

    walk(p.parse(pattern))
    return found


def test_no_pattern_repeats_a_group_possessively() -> None:
    """The construct gh-100061 and gh-106052 break, found on a Python that has the fix."""
    assert _repeated_groups(r"@[ \n]*+(?:\w++[ \n]*+\.[ \n]*+)*+(\w++)") == ["POSSESSIVE_REPEAT"]
    assert _repeated_groups(r"(?>ab)c(?:xy|z)*+") == ["ATOMIC_GROUP", "POSSESSIVE_REPEAT"]
    assert _repeated_groups(r"\n[ ]{0,8}+(?:\w)++[^a]*+.?+(?=[^ \n])") == []  # one character: safe
    _read("def f():\n    pass\n")  # the dedent pattern of indent 0 (made when first needed)
    patterns = [v for m in (lexical, masked_text, parsing) for v in vars(m).values() if isinstance(v, re.Pattern)]
    patterns += masked_text._DEDENT.values()
    assert len(patterns) > 10
    for pattern in patterns:
        assert not _repeated_groups(pattern.pattern), pattern.pattern


@pytest.mark.parametrize(
    ("old", "new", "skel_changes", "body_changes"),
    [
        ("    return x + 1\n", "    return x + 1  # why\n", False, False),
        ("    return x + 1\n", "\n    return x + 1\n\n", False, False),
        ("    return x + 1\n", "    return x + 2\n", False, True),
        ('    s = "a b"\n', '    s = "a  b"\n', False, True),  # inside a string: every blank counts
        ("LIMIT = 3\n", "LIMIT = 4\n", True, False),
        ("def f(x):\n", "def f(x, y=1):\n", True, False),
        ("    if x:\n        s = 1\n", "    if x:\n        pass\n    s = 1\n", False, True),  # indentation
    ],
)
def test_digests_ignore_comments_and_blank_lines_only(
    old: str, new: str, skel_changes: bool, body_changes: bool
) -> None:
    src = 'LIMIT = 3\n\n\ndef f(x):\n    s = "a b"\n    if x:\n        s = 1\n    return x + 1\n'
    assert old in src
    before, after = _read(src).facts, _read(src.replace(old, new)).facts
    assert (before.skel != after.skel) is skel_changes
    assert (before.funcs[0].body_digest != after.funcs[0].body_digest) is body_changes


@pytest.mark.parametrize(
    "src",
    [
        "def f():\n\treturn 1\n",  # tabs
        "x = 'unterminated\n",
        "x = (1,\n",  # a bracket left open
        "def broken(:\n    return 1\n",
        "x = 1 \\ 2\n",  # a backslash that continues nothing
    ],
)
def test_text_it_cannot_read_safely_goes_to_ast(src: str) -> None:
    assert lexical.read(src.encode()) is None


def test_tabs_in_strings_and_comments_are_read_in_code_they_go_to_ast() -> None:
    # A tab in a docstring or a comment (as transformers' generation/utils.py has) is no
    # indentation: such a file is read here, not parsed with `ast`.
    src = 'def f():\n    """Doc\n\t\tindented with tabs."""\n    return g()  # a\ttab\n'
    parsed = lexical.read(src.encode())
    assert parsed is not None
    assert parsed.facts.funcs[0].calls == ("g",)
    assert lexical.read(b"def f():\n    x = 1\t+ 2\n") is None  # in code: `ast`
    fields = lexical.read(b'def f():\n    return f"{a\t(b)}"\n')  # in an f-string's field: a blank
    assert fields is not None and set(fields.facts.funcs[0].calls) >= {"a"}


def test_relative_import_module_only_by_that_name() -> None:
    parsed = _read(
        """
        import importlib
        A = importlib.import_module(".a", package="p.q")
        B = my_import_module(".b", package="p.q")
        """
    )
    modules = {r.module for r in parsed.refs if isinstance(r, ImportRef)}
    assert "p.q.a" in modules and "p.q.b" not in modules


def test_ast_reference_matches_the_old_reader() -> None:
    src = b"import a\n\ndef f():\n    return g()\n"
    tree = ast.parse(src)
    assert parse_file_ast(src).facts == file_facts(tree)


def test_hash_files_reads_a_file_again_only_when_its_stat_changed(tmp_path: Path) -> None:
    path = tmp_path / "m.py"
    path.write_text("x = 1\n")
    old = os.stat(path).st_mtime_ns / 1e9
    files = {"m.py": str(path)}
    stats: dict[str, str] = {}
    fresh = hash_files(files, stats=stats, now=old + 10)
    assert set(stats) == {"m.py"}
    assert hash_files(files, {"m.py": (stats["m.py"], "cached")}) == {"m.py": "cached"}  # not read
    path.write_text("x = 2\n")  # same size; ctime moves
    assert hash_files(files, {"m.py": (stats["m.py"], "cached")}) != {"m.py": "cached"}
    racy: dict[str, str] = {}
    assert hash_files(files, stats=racy, now=old) != fresh and racy == {}  # written just now: not kept
    contents: dict[str, bytes] = {}  # the bytes read, for parsing without reading again
    hash_files(files, {"m.py": (stats["m.py"], "cached")}, contents=contents)
    assert contents == {str(path): b"x = 2\n"}
    contents.clear()
    now = os.stat(path)
    sig = f"{now.st_size}:{now.st_mtime_ns}:{now.st_ctime_ns}:{now.st_ino}"
    assert hash_files(files, {"m.py": (sig, "cached")}, contents=contents) == {"m.py": "cached"} and contents == {}


def test_only_the_fields_of_an_f_string_are_code() -> None:
    parsed = _read(
        """
        def f(x):
            return f"task named_in_text (not a call) {{literal}} {compute(x)!r} {x:{width(x)}}"
        """
    )
    calls = set(parsed.facts.funcs[0].calls)
    assert {"compute", "width"} <= calls
    assert not {"named_in_text", "literal"} & calls


def test_many_files_are_read_in_processes_of_their_own_and_here_if_those_fail(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    paths = []
    for i in range(6):
        path = tmp_path / f"m{i}.py"
        path.write_text(f"import pkg.m{i}\n\n\ndef f{i}():\n    return {i}\n")
        paths.append(str(path))
    paths.append(str(tmp_path / "gone.py"))
    serial = parsing._read_chunk(paths)
    assert serial[-1] is None and all(p is not None for p in serial[:-1])
    monkeypatch.setattr(parsing, "PARALLEL_MIN_FILES", 2)
    monkeypatch.setattr(parsing, "PARALLEL_MIN_BYTES", 1)
    monkeypatch.setattr(parsing.os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
    assert parsing._read_files(paths) == serial
    monkeypatch.setattr(parsing.sys, "executable", str(tmp_path / "no-python"))
    assert parsing._read_files(paths) == serial
