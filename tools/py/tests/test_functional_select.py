"""The functional scripts' selection core: units (what an edit is judged by), verdicts, the
reach file, the git adapter (a real git repository) and the probe (a real Python process)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from testharness.functional import cli as functional_cli
from testharness.functional import store, tree
from testharness.functional.reach import reach_of, repository_paths
from testharness.functional.select import Rules, SinceCommit, SinceRun, judge
from testharness.functional.units import SKELETON, changed_units, file_units, reached_units
from testharness.remote_select.scan import digest_bytes
from testharness.settings import load_settings

MODEL = b'''"""A module."""
import math

SCALE = 2


def loss(x, *, scale=SCALE):
    y = x * scale
    return math.sqrt(y)


def unused():
    return 1


class Trainer:
    lr = 0.1

    def step(self, x):
        def inner(v):
            return v + 1
        return inner(x) * self.lr

    @staticmethod
    def never():
        return 0
'''


def edited(old: bytes, new: bytes, source: bytes = MODEL) -> bytes:
    assert old in source
    return source.replace(old, new)


# -- units -----------------------------------------------------------------------------


def test_reached_units_are_the_functions_with_an_executed_body_line() -> None:
    # What runs at import: the docstring, import, constant, def/class lines, the class body and
    # the decorator; loss's body is lines 8-9, step's 20-22 (inner's line 21 is step's).
    import_time = {1, 2, 4, 7, 12, 16, 17, 19, 24, 25}
    assert reached_units(MODEL, import_time) == set()
    assert reached_units(MODEL, import_time | {8, 9}) == {"loss"}
    assert reached_units(MODEL, import_time | {21}) == {"Trainer.step"}  # a line of inner() is step's
    assert reached_units(b"def broken(:\n", {1}) == set()


def test_a_body_edit_changes_that_function_only_and_comments_change_nothing() -> None:
    before = file_units(MODEL)
    body = file_units(edited(b"y = x * scale", b"y = x * scale * 0"))
    assert changed_units(before, body, ["loss", "unused", "Trainer.step"]) == ["loss"]
    assert changed_units(before, body, ["unused"]) == []
    nested = file_units(edited(b"return v + 1", b"return v + 2"))
    assert changed_units(before, nested, ["Trainer.step", "Trainer.never"]) == ["Trainer.step"]
    comment = file_units(edited(b"    y = x * scale\n", b"    # why\n    y = x * scale  # scaled\n"))
    assert changed_units(before, comment, ["loss"]) == []


@pytest.mark.parametrize(
    "old, new",
    [
        (b"SCALE = 2", b"SCALE = 3"),
        (b"lr = 0.1", b"lr = 0.2"),
        (b"scale=SCALE", b"scale=1"),
        (b"import math", b"import cmath as math"),
    ],
    ids=["constant", "class attribute", "default value", "import"],
)
def test_import_time_edits_change_the_skeleton(old: bytes, new: bytes) -> None:
    assert changed_units(file_units(MODEL), file_units(edited(old, new)), []) == [SKELETON]


def test_a_reached_function_that_is_gone_counts_as_changed() -> None:
    gone = file_units(edited(b"def unused():\n    return 1\n", b""))
    assert "unused" in changed_units(file_units(MODEL), gone, ["unused"])


# -- verdicts --------------------------------------------------------------------------

RULES = Rules(
    source=("pkg",),
    environment=("uv.lock", "docker/*"),
    harness=("tests/functional/common.sh",),
    unrelated=("docs/*", "*.md"),
)


def repo_files() -> dict[str, bytes]:
    return {
        "pkg/model.py": MODEL,
        "pkg/other.py": b"def other():\n    return 2\n",
        "examples/run.py": b"import pkg.model\n",
        "examples/grpo.py": b"import pkg.other\n",
        "examples/config.yaml": b"lr: 1\n",
        "uv.lock": b"lock",
        "tests/functional/common.sh": b"common",
        "docs/guide.md": b"guide",
    }


def recorded(
    files: dict[str, bytes], *, reached: dict[str, set[int]], inputs: list[str], **kw: object
) -> store.ScriptRecord:
    start = {rel: digest_bytes(content) for rel, content in files.items()}
    reach = reach_of(start, reached, files.get, RULES)
    fields = {"result": store.PASSED, "files": start, "inputs": inputs, "reach": reach, "gpus": 0, "python": "3.11.7"}
    fields.update(kw)
    return store.ScriptRecord(**fields)  # type: ignore[arg-type]


LOSS_RAN = {"pkg/model.py": {1, 2, 4, 7, 8, 9, 12, 16, 17, 19, 24, 25}}
SFT = recorded(repo_files(), reached=LOSS_RAN, inputs=["examples/run.py", "examples/config.yaml"])
GRPO = recorded(repo_files(), reached={"pkg/other.py": {1, 2}}, inputs=["examples/grpo.py"])
READ_BY_ANY = set(SFT.inputs) | set(GRPO.inputs)


def verdict_since_run(record: store.ScriptRecord | None, files: dict[str, bytes], gpus: int = 0) -> str:
    edit = SinceRun({rel: digest_bytes(c) for rel, c in files.items()}, files.get)
    return judge(record, edit, RULES, read_by_any=READ_BY_ANY, gpus=gpus, python="3.11.7").line()


@pytest.mark.parametrize(
    "changes, sft, grpo",
    [
        ({}, "skipped: nothing it reached changed", "skipped: nothing it reached changed"),
        ({"pkg/model.py": edited(b"y = x * scale", b"y = -x")}, "runs: changed pkg/model.py::loss", "skipped: nothing it reached changed"),
        ({"pkg/model.py": edited(b"return 1", b"return 3")}, "skipped: nothing it reached changed", "skipped: nothing it reached changed"),
        ({"pkg/model.py": edited(b"lr = 0.1", b"lr = 1")}, "runs: changed pkg/model.py (import-time code)", "skipped: nothing it reached changed"),
        ({"pkg/other.py": b"def other():\n    return 3\n"}, "skipped: nothing it reached changed", "runs: changed pkg/other.py::other"),
        ({"pkg/new.py": b"x = 1\n"}, "skipped: nothing it reached changed", "skipped: nothing it reached changed"),
        ({"examples/config.yaml": b"lr: 2\n"}, "runs: changed examples/config.yaml", "skipped: nothing it reached changed"),
        ({"uv.lock": b"other lock"}, "runs: uv.lock changed", "runs: uv.lock changed"),
        ({"docker/Dockerfile": b"FROM x"}, "runs: docker/Dockerfile changed", "runs: docker/Dockerfile changed"),
        ({"tests/functional/common.sh": b"c2"}, "runs: tests/functional/common.sh changed (the functional harness)", "runs: tests/functional/common.sh changed (the functional harness)"),
        ({"docs/guide.md": b"more", "README.md": b"new"}, "skipped: nothing it reached changed", "skipped: nothing it reached changed"),
        ({"data/extra.json": b"{}"}, "runs: changed data/extra.json, which no recorded run reads (the reach cannot see it)", "runs: changed data/extra.json, which no recorded run reads (the reach cannot see it)"),
        ({"pkg/model.py": None}, "runs: pkg/model.py was deleted", "skipped: nothing it reached changed"),
    ],
    ids=["no change", "reached function", "unreached function", "import-time", "other script's function", "new source file",
         "input", "environment", "environment glob", "harness", "unrelated", "unknown file", "deleted"],
)  # fmt: skip
def test_verdicts_since_the_last_passing_run(changes: dict[str, bytes | None], sft: str, grpo: str) -> None:
    files = _with(changes)
    assert verdict_since_run(SFT, files) == sft
    assert verdict_since_run(GRPO, files) == grpo


def _with(changes: dict[str, bytes | None]) -> dict[str, bytes]:
    files: dict[str, bytes | None] = dict(repo_files())
    files.update(changes)
    return {k: v for k, v in files.items() if v is not None}


def test_the_reason_that_runs_every_script_is_shown_first_with_a_count() -> None:
    files = _with({"pkg/model.py": edited(b"y = x * scale", b"y = -x"), "uv.lock": b"x", "examples/config.yaml": b"y"})
    assert verdict_since_run(SFT, files) == "runs: uv.lock changed (and 2 more)"


def test_scripts_without_a_good_record_run() -> None:
    files = repo_files()
    assert verdict_since_run(None, files) == "runs: never recorded"
    assert verdict_since_run(store.ScriptRecord(result=store.FAILED), files) == "runs: never passed"
    from dataclasses import replace

    assert verdict_since_run(replace(SFT, result=store.FAILED), files) == "runs: failed at its last run"
    assert verdict_since_run(SFT, files, gpus=1) == "runs: recorded with 0 GPU(s), 1 visible now"
    assert (
        verdict_since_run(replace(SFT, python="3.13.5"), files) == "runs: recorded under Python 3.13.5, this is 3.11.7"
    )


def test_since_a_commit_judges_the_difference_per_function() -> None:
    old = repo_files()
    new = _with({"pkg/model.py": edited(b"return 1", b"return 2"), "pkg/other.py": b"def other():\n    return 0\n"})
    edit = SinceCommit(["pkg/model.py", "pkg/other.py"], old.get, new.get)
    kw = {"read_by_any": READ_BY_ANY, "gpus": 0, "python": "3.11.7"}
    assert judge(SFT, edit, RULES, **kw).line() == "skipped: nothing it reached changed"  # type: ignore[arg-type]
    assert judge(GRPO, edit, RULES, **kw).line() == "runs: changed pkg/other.py::other"  # type: ignore[arg-type]


def test_a_file_changed_during_the_run_runs_next_time() -> None:
    files = repo_files()
    start = {rel: digest_bytes(c) for rel, c in files.items()}
    during = _with({"pkg/model.py": MODEL + b"\n# edited while it ran\n"})
    reach = reach_of(start, LOSS_RAN, during.get, RULES)
    rec = store.ScriptRecord(result=store.PASSED, files=start, reach=reach, python="3.11.7")
    assert verdict_since_run(rec, during) == "runs: changed pkg/model.py (import-time code)"


def test_repository_paths_keeps_repository_files_only(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text("")
    got = repository_paths(
        [str(tmp_path / "a.py"), str(tmp_path / "b.py"), "/usr/lib/x.py"], tmp_path, {"a.py": "d", "b.py": "d"}
    )
    assert got == {"a.py", "b.py"}


# -- the reach file ----------------------------------------------------------------------


def test_the_reach_file_round_trips(tmp_path: Path) -> None:
    path = tmp_path / "reach.json"
    with store.updating(path) as records:
        records["sft"] = SFT
    assert store.load(path) == ({"sft": SFT}, None)
    with store.updating(path) as records:
        records["sft"] = store.ScriptRecord(result=store.FAILED)
    assert store.load(path)[0]["sft"].result == store.FAILED
    assert not (tmp_path / "reach.json.lock").exists()


def _scripts(scripts: object) -> bytes:
    return json.dumps({"format": store.FORMAT, "version": store.VERSION, "scripts": scripts}).encode()


@pytest.mark.parametrize(
    "damage, why",
    [
        (b"{not json", "is corrupted (not JSON)"),
        (b"[" * 100_000 + b"]" * 100_000, "is corrupted (JSON nested too deep)"),
        (b'{"n": ' + b"1" * 5000 + b"}", "is corrupted (not JSON)"),  # past Python's int-digits limit
        (b"\xff\xfe", "is corrupted (not UTF-8 text)"),
        (b'{"format": "other"}', f"is not a {store.FORMAT} file"),
        (_scripts({"x": {"result": "odd"}}), "has an unexpected structure (a record needs a result)"),
        (_scripts({"sft": {"result": "passed", "gpus": 1e400}}), "has an unexpected structure (OverflowError: "),
        (_scripts([]), "has an unexpected structure ('scripts' must be an object)"),
        (_scripts({"sft": {"result": "passed", "reach": {"a.py": 7}}}), "has an unexpected structure (TypeError: "),
    ],
    ids=[
        "not json",
        "nested",
        "int digits",
        "not utf-8",
        "other format",
        "bad result",
        "overflow",
        "scripts list",
        "reach",
    ],
)
def test_a_damaged_reach_file_is_one_line_moved_aside_and_rebuilt(tmp_path: Path, damage: bytes, why: str) -> None:
    path = tmp_path / "reach.json"
    path.write_bytes(damage)
    records, warning = store.load(path)
    assert records == {} and warning is not None and "\n" not in warning
    assert warning.startswith(f"reach.json {why}"), warning
    assert warning.endswith("; every script runs until a passing run records it again"), warning
    aside = [p for p in tmp_path.iterdir() if p.name.startswith("reach.json.corrupt-")]
    assert [p.read_bytes() for p in aside] == [damage] and f"moved it to {aside[0].name};" in warning
    assert not path.exists()
    with store.updating(path) as records:  # the next record mends it
        records["sft"] = SFT
    assert store.load(path) == ({"sft": SFT}, None)


def test_a_reach_file_of_another_version_is_replaced_not_moved_aside(tmp_path: Path) -> None:
    path = tmp_path / "reach.json"
    path.write_text(json.dumps({"format": store.FORMAT, "version": 99, "scripts": {}}))
    records, warning = store.load(path)
    assert records == {} and warning == (
        f"reach.json has format version 99, expected {store.VERSION}; every script runs until a passing run records it again"
    )
    assert [p.name for p in tmp_path.iterdir()] == ["reach.json"]


# -- the git adapter, on a real repository -------------------------------------------------


def git(repo: Path, *args: str) -> str:
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@t",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@t",
    }
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True, env=env).stdout


def test_records_that_break_judging_run_every_script(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "pyproject.toml").write_text('[tool.testharness.functional]\nreach_file = ".reach.json"\n')
    git(tmp_path, "init", "-q")
    git(tmp_path, "add", ".")
    git(tmp_path, "commit", "-qm", "first")
    with store.updating(tmp_path / ".reach.json") as records:
        records["sft"] = SFT

    def broken(*args: object, **kwargs: object) -> None:
        raise KeyError("a bug, or a record no check foresaw")

    monkeypatch.setattr(functional_cli, "judge", broken)
    found, notes = functional_cli.verdicts(load_settings(tmp_path), ["sft", "grpo"], 0, None)
    why = "runs: the records could not be judged (KeyError: 'a bug, or a record no check foresaw')"
    assert notes == [] and {name: v.line() for name, v in found.items()} == {"sft": why, "grpo": why}


def test_tree_sees_what_git_would_commit(tmp_path: Path) -> None:
    with pytest.raises(tree.TreeError):
        tree.snapshot(tmp_path)
    git(tmp_path, "init", "-q", "-b", "main")
    (tmp_path / ".gitignore").write_text("ignored/\n")
    (tmp_path / "a.py").write_text("def f():\n    return 1\n")
    (tmp_path / "ignored").mkdir()
    (tmp_path / "ignored" / "x").write_text("x")
    git(tmp_path, "add", ".")
    git(tmp_path, "commit", "-q", "-m", "one")
    base = tree.head(tmp_path)
    assert base and tree.resolve(tmp_path, "main") == base
    (tmp_path / "a.py").write_text("def f():\n    return 2\n")
    (tmp_path / "new.txt").write_text("n")
    assert set(tree.snapshot(tmp_path)) == {".gitignore", "a.py", "new.txt"}
    assert tree.changed_since(tmp_path, base) == ["a.py", "new.txt"]
    assert tree.content_at(tmp_path, base, "a.py") == b"def f():\n    return 1\n"
    assert tree.content_at(tmp_path, base, "new.txt") is None
    for bad in ("nope", "--all"):
        with pytest.raises(tree.TreeError, match="no commit|not a revision"):
            tree.resolve(tmp_path, bad)
    assert tree.is_ancestor(tmp_path, base)


# -- the probe, in a real Python process -----------------------------------------------------


def test_the_probe_runs_the_script_as_python_would_and_notes_what_it_read(tmp_path: Path) -> None:
    (tmp_path / "helper.py").write_text("VALUE = 7\n")
    (tmp_path / "config.yaml").write_text("a: 1\n")
    (tmp_path / "script.py").write_text(
        "import sys, helper\n"
        "open(__file__.replace('script.py', 'config.yaml')).read()\n"
        "open(__file__.replace('script.py', 'out.txt'), 'w').write('x')\n"
        "print(__name__, sys.argv, helper.VALUE)\n"
        "sys.exit(3)\n"
    )
    reads = tmp_path / "reads.txt"
    env = {**os.environ, "TESTHARNESS_FUNCTIONAL_READS": str(reads)}
    done = subprocess.run(
        [sys.executable, "-m", "testharness.functional.probe", str(tmp_path / "script.py"), "x=1"],
        capture_output=True, text=True, env=env, cwd=tmp_path, check=False, timeout=60,
    )  # fmt: skip
    assert done.returncode == 3, done.stderr
    assert done.stdout.strip() == f"__main__ ['{tmp_path / 'script.py'}', 'x=1'] 7"
    noted = set(reads.read_text().splitlines())
    assert {str(tmp_path / n) for n in ("helper.py", "config.yaml", "script.py")} <= noted
    assert str(tmp_path / "out.txt") not in noted  # written, not read
