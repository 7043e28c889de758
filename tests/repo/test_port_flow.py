"""Moving over from upstream NeMo RL the documented way (docs/from-upstream.md, "Port a test
from upstream"): copy upstream's tests/unit/. over ours, `testharness port-check --fix`, then
upstream's L0 scripts as written.

- the docs' table of what port-check judges is port-check's own list (testharness.port_check.COVERED);
- the docs' list of upstream's test files at this project's paths is the one port-check is
  checked against here (and, with NRL_UPSTREAM_CHECKOUT, against upstream's real tree);
- the extras upstream's L0 scripts name (`uv run --extra vllm ...`) are declared, in
  pyproject.toml and uv.lock, so uv runs those lines.

NRL_UPSTREAM_CHECKOUT: a checkout of upstream NeMo RL (its code is not ours to commit): the
tests that need its real files run only where it is set.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from testharness.port_rules import covered_table

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "from-upstream.md"
UPSTREAM = Path(os.environ["NRL_UPSTREAM_CHECKOUT"]) if os.environ.get("NRL_UPSTREAM_CHECKOUT") else None
needs_upstream = pytest.mark.skipif(
    UPSTREAM is None, reason="set NRL_UPSTREAM_CHECKOUT to a checkout of upstream NeMo RL"
)


def _run(
    cwd: Path, *args: str, env: dict[str, str] | None = None, timeout: int = 300
) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "TESTHARNESS_", "COVERAGE_"))}
    base.update(env or {})
    return subprocess.run(list(args), cwd=cwd, env=base, capture_output=True, text=True, timeout=timeout)


# ------------------------------------------------ the docs and port-check's list


def same_path_in_the_docs() -> list[str]:
    """Upstream's test files at this project's paths, as docs/from-upstream.md lists them."""
    found = re.search(r"<!-- same-path -->(.*?)<!-- /same-path -->", DOC.read_text(), re.S)
    assert found, "docs/from-upstream.md lost its <!-- same-path --> list"
    return re.findall(r"`([^`]+)`", found.group(1))


def test_the_docs_table_of_what_port_check_judges_is_its_own_list() -> None:
    text = DOC.read_text()
    header = "| file | counts as replaced when | `--fix` |\n| --- | --- | --- |\n"
    assert header in text
    rows = text.split(header, 1)[1].split("\n\n", 1)[0].splitlines()
    assert rows == covered_table()


def test_the_docs_count_the_files_they_list() -> None:
    listed = same_path_in_the_docs()
    assert len(listed) == 6 and len(set(listed)) == 6
    numbers = {2: "two", 3: "three", 4: "four", 5: "five", 6: "six", 7: "seven"}
    assert f"{numbers[len(listed)]} of its test files have one" in DOC.read_text()
    assert f"{numbers[len(listed)]} of upstream's test files" in (REPO / "README.md").read_text()
    for rel in listed:
        assert (REPO / "tests" / "unit" / rel).is_file(), rel


def test_port_check_names_the_upstream_files_that_would_replace_ours(tmp_path: Path) -> None:
    same_path = same_path_in_the_docs()
    upstream = tmp_path / "RL" / "tests" / "unit"
    for rel in [*same_path, "algorithms/test_sft_v2.py"]:
        (upstream / rel).parent.mkdir(parents=True, exist_ok=True)
        (upstream / rel).write_text("def test_upstream():\n    pass\n")
    files = [str(upstream / rel) for rel in [*same_path, "algorithms/test_sft_v2.py"]]
    proc = _run(REPO, sys.executable, "-m", "testharness", "port-check", *files)  # reads only
    assert proc.returncode == 1, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    for rel, line in zip(same_path, lines, strict=False):
        side = rel.replace(".py", "_upstream.py")
        assert line.startswith(f"port-check: COLLIDES: tests/unit/{rel} is this project's test file (")
        assert line.endswith(f"copy the upstream file as tests/unit/{side}")
    assert (
        lines[len(same_path)]
        == "port-check: new: tests/unit/algorithms/test_sft_v2.py no file of this project there: copy it"
    )
    assert proc.stderr == "port-check: 6 collisions (see above)\n"


def _tracked(root: Path, under: str) -> set[str]:
    out = subprocess.run(["git", "-C", str(root), "ls-files", under], capture_output=True, text=True, check=True)
    return {line.removeprefix(f"{under}/") for line in out.stdout.splitlines()}


@needs_upstream
def test_the_docs_list_is_what_upstreams_tree_shares_with_ours() -> None:
    assert UPSTREAM is not None
    theirs = {p.relative_to(UPSTREAM / "tests" / "unit").as_posix() for p in (UPSTREAM / "tests" / "unit").rglob("*")}
    shared = _tracked(REPO, "tests/unit") & theirs
    tests = {rel for rel in shared if Path(rel).name.startswith("test_")}
    assert sorted(tests) == sorted(same_path_in_the_docs())
    differing_inits = {
        rel
        for rel in shared
        if Path(rel).name == "__init__.py"
        and (REPO / "tests/unit" / rel).read_bytes() != (UPSTREAM / "tests/unit" / rel).read_bytes()
    }
    assert len(differing_inits) == 6  # "six __init__.py" (the docs, the README)
    assert shared - tests - differing_inits - {"models/__init__.py"} == {"conftest.py", "prepare_unit_test_assets.py"}


# ------------------------------------------------ the extras upstream's L0 scripts name

# `uv run --extra NAME` in upstream's L0 scripts at 7ea279a (tests/unit/L0_Unit_Tests_*.sh)
L0_EXTRAS = {"automodel", "mcore", "modelopt", "nemo_gym", "sglang", "trtllm", "vllm"}


def _normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()  # as uv (PEP 685) compares extra names


def test_every_extra_upstreams_l0_scripts_name_is_declared_and_locked() -> None:
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    declared = {_normalized(n) for n in pyproject["project"]["optional-dependencies"]}
    lock = tomllib.loads((REPO / "uv.lock").read_text())
    ours = next(p for p in lock["package"] if p["name"] == "nemo-rl")
    wanted = {_normalized(n) for n in L0_EXTRAS}
    assert wanted <= declared
    assert wanted <= {_normalized(n) for n in ours["metadata"]["provides-extras"]}  # what `uv run --locked` checks
    for name in L0_EXTRAS - {"mcore"}:  # empty: nothing to install, nothing upstream's backends bring
        assert pyproject["project"]["optional-dependencies"][name] == [], name


@needs_upstream
def test_the_extras_are_those_upstreams_l0_scripts_name() -> None:
    assert UPSTREAM is not None
    named = set()
    for script in (UPSTREAM / "tests" / "unit").glob("L0_*.sh"):
        named |= set(re.findall(r"uv run [^\n]*?--extra[ =]([\w.-]+)", script.read_text()))
    assert {_normalized(n) for n in named} == {_normalized(n) for n in L0_EXTRAS}
