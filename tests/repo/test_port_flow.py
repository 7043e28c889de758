"""Moving over from upstream NeMo RL the documented way (docs/from-upstream.md, "Port a test
from upstream"): copy upstream's tests/unit/. over ours, `testharness port-check --fix`, then
upstream's L0 scripts as written.

- the docs' table of what port-check judges is port-check's own list (testharness.port_check.COVERED);
- the docs' list of upstream's test files at this project's paths is the one port-check is
  checked against here (and, with NRL_UPSTREAM_CHECKOUT, against upstream's real tree);
- the extras upstream's L0 scripts name (`uv run --extra vllm ...`) are declared, in
  pyproject.toml and uv.lock, so uv runs those lines;
- the whole flow, end to end, on a stand-in tree written here (an upstream-like conftest that
  imports a plugin and library code this project lacks, its __init__.py, asset script and a
  test file at our paths, its excluded list, an `uv run --extra vllm` line, a uv stand-in that
  refuses undeclared extras as uv does): the copied L0 script runs to its own verdict; and,
  with NRL_UPSTREAM_CHECKOUT, upstream's real tests/unit/L0_Unit_Tests_Other.sh with real uv.

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


# ------------------------------------------------ the whole flow, end to end, on a stand-in tree

# "Upstream": a tree shaped like upstream's tests/unit (written here: its code is not ours to
# commit). Its conftest imports a plugin and library code this project does not have, its
# __init__.py declares its remote-select plugin, its asset script would download, one test file
# has our path, its excluded list deselects a test of that file, one file needs library code we
# lack, two files share a name, and its shard scripts call `uv run --extra vllm`.
UPSTREAM_TREE = {
    "__init__.py": "# Copyright (c) upstream\npytest_plugins = ['tests.unit._plugins.remote_select']\n",
    "conftest.py": "import pytest\nimport upstream_remote_select  # noqa: F401\n"
    "from nemo_rl.distributed.virtual_cluster import init_ray  # noqa: F401\n\n\n"
    "@pytest.fixture\ndef upstream_only():\n    return 1\n",
    "prepare_unit_test_assets.py": "raise SystemExit('upstream asset builder: would download gated models')\n",
    "algorithms/__init__.py": "# Copyright (c) upstream\n",
    "algorithms/test_grpo.py": "def test_calculate_rewards_single_task():\n    pass\n\n\n"
    "def test_calculate_rewards_multiple_tasks():\n    raise AssertionError('deselected in FAST mode, ran')\n\n\n"
    "def test_calculate_rewards_missing_environment():\n    pass\n",
    "test_meta.py": "import os\n\n\ndef test_usage_stats_disabled_in_tests():\n"
    "    assert os.environ['RAY_USAGE_STATS_ENABLED'] == '0'\n",
    "utils/test_config.py": "def test_a_file_that_shares_its_name_with_ours():\n    pass\n",
    "evals/test_eval.py": "from nemo_rl.evals import run_env_eval  # noqa: F401\n\n\ndef test_eval():\n    pass\n",
    "excluded_unit_tests.sh": "EXCLUDED_UNIT_TESTS=(\n"
    "    --deselect=tests/unit/algorithms/test_grpo.py::test_calculate_rewards_multiple_tasks\n"
    ")\n",
    "run_unit_shard_common.sh": "set -xeuo pipefail\n"
    'SCRIPT_DIR=$( cd -- "$( dirname -- "${BASH_SOURCE[0]}" )" &> /dev/null && pwd )\n'
    "PROJECT_ROOT=$(realpath ${SCRIPT_DIR}/../..)\ncd ${PROJECT_ROOT}\n"
    'EXCLUDED_UNIT_TESTS=()\nif [[ "${FAST:-0}" == "1" ]]; then\n'
    "    source ${SCRIPT_DIR}/excluded_unit_tests.sh\nfi\n"
    "uv run tests/unit/prepare_unit_test_assets.py\n",
    "L0_Unit_Tests_Other.sh": 'source "$(dirname "${BASH_SOURCE[0]}")/run_unit_shard_common.sh"\n'
    'uv run --no-sync bash -x ./tests/run_unit.sh "unit/" "--ignore=unit/evals/" "${EXCLUDED_UNIT_TESTS[@]}" --hf-gated\n'
    'uv run --extra vllm bash -x ./tests/run_unit.sh "unit/" "${EXCLUDED_UNIT_TESTS[@]}" --hf-gated --vllm-only\n',
    "L0_Unit_Tests_Evals.sh": 'source "$(dirname "${BASH_SOURCE[0]}")/run_unit_shard_common.sh"\n'
    'uv run --no-sync bash -x ./tests/run_unit.sh "unit/evals/" "${EXCLUDED_UNIT_TESTS[@]}" --hf-gated\n',
}

# This project, small: its real pyproject.toml (extras, marker groups), run_unit.sh and
# conftest.py, with test files and an asset script of its own.
OURS = {
    "tests/__init__.py": "",
    "tests/unit/__init__.py": "",
    "tests/unit/algorithms/__init__.py": "",
    "tests/unit/prepare_unit_test_assets.py": "print('[assets] ours: built offline')\n",
    "tests/unit/algorithms/test_grpo.py": "import math\n\nGROUPS = [[1.0, 0.0], [0.5, 0.5]]\n\n\n"
    "def test_group_advantages():\n    assert [sum(g) for g in GROUPS] == [1.0, 1.0]\n\n\n"
    "def test_reject_ragged_groups():\n    assert len({len(g) for g in GROUPS}) == 1\n\n\n"
    "def test_one_step():\n    assert math.isclose(GROUPS[1][0], 0.5)\n",
    "tests/unit/test_config.py": "def test_load_config():\n    pass\n",
}

# uv, as far as these scripts use it: `uv run [--no-sync] [--extra NAME] CMD`. It refuses an
# extra the project does not declare, with uv's words, and runs CMD without syncing anything.
UV = """#!{python}
import os, re, sys, tomllib
from pathlib import Path

args = sys.argv[1:]
assert args[:1] == ["run"], args
args, extras = args[1:], []
while args[0].startswith("-"):
    option = args.pop(0)
    if option == "--extra":
        extras.append(args.pop(0))
    elif option != "--no-sync":
        sys.exit(f"uv stand-in: {{option}} is not handled here")
root = Path.cwd()
while not (root / "pyproject.toml").is_file():
    root = root.parent
normal = lambda name: re.sub(r"[-_.]+", "-", name).lower()
project = tomllib.loads((root / "pyproject.toml").read_text())["project"]
declared = {{normal(name) for name in project.get("optional-dependencies", {{}})}}
for extra in extras:
    if normal(extra) not in declared:
        print(f"error: Extra `{{extra}}` is not defined in the project's `optional-dependencies` table", file=sys.stderr)
        sys.exit(2)
command = [sys.executable, *args] if args[0].endswith(".py") else args
os.execvp(command[0], command)
"""


def _git(cwd: Path, *args: str) -> str:
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false", "-C", str(cwd)]
    return subprocess.run([*git, *args], check=True, capture_output=True, text=True).stdout


@pytest.fixture
def stand_in(tmp_path: Path) -> tuple[Path, Path, dict[str, str]]:
    """(this project, committed; upstream's stand-in tests/unit; the environment: the uv stand-in first on PATH)."""
    import shutil

    root = tmp_path / "proj"
    for rel, text in {
        **OURS,
        "pyproject.toml": None,
        "tests/run_unit.sh": None,
        "tests/unit/conftest.py": None,
    }.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        if text is None:
            shutil.copy(REPO / rel, root / rel)
        else:
            (root / rel).write_text(text)
    (root / "tests" / "unit" / "test_assets").mkdir()  # built (git-ignored in the real project)
    (root / "tests" / "unit" / "test_assets" / "prepared").touch()
    (root / ".gitignore").write_text(
        "tests/unit/test_assets/\nunit_results*\n__pycache__/\n.coverage*\ncoverage.json\n"
    )
    _git(root, "init", "-q")
    _git(root, "add", ".")
    _git(root, "commit", "-qm", "ours")
    upstream = tmp_path / "RL" / "tests" / "unit"
    for rel, text in UPSTREAM_TREE.items():
        (upstream / rel).parent.mkdir(parents=True, exist_ok=True)
        (upstream / rel).write_text(text)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "uv").write_text(UV.format(python=sys.executable))
    (bin_dir / "uv").chmod(0o755)
    path = os.pathsep.join([str(bin_dir), str(Path(sys.executable).parent), os.environ.get("PATH", "")])
    env = {"PATH": path, "PYTHON": sys.executable, "TESTHARNESS_NO_DISCOVERY": "1"}
    return root, upstream, env


def test_a_copied_l0_script_runs_to_its_own_verdict_after_the_copy_first_flow(
    stand_in: tuple[Path, Path, dict[str, str]],
) -> None:
    import json

    root, upstream, env = stand_in
    subprocess.run(["cp", "-r", f"{upstream}/.", str(root / "tests" / "unit")], check=True)  # the docs' command

    check = _run(root, "uv", "run", "testharness", "port-check", env=env)
    assert check.returncode == 1, check.stdout + check.stderr
    for rel in ("__init__.py", "conftest.py", "prepare_unit_test_assets.py", "algorithms/test_grpo.py"):
        assert f"port-check: REPLACED: tests/unit/{rel} holds a copy" in check.stdout
    fixed = _run(root, "uv", "run", "testharness", "port-check", "--fix", env=env)
    assert fixed.returncode == 0, fixed.stdout + fixed.stderr
    assert fixed.stdout.splitlines()[-2:] == [
        "port-check: fixed: tests/unit/excluded_unit_tests.sh: 1 name of 1 renamed test file now points at the "
        "_upstream.py copies",
        "port-check: no file of this project is in the way or replaced",
    ]
    assert _git(root, "status", "--porcelain", "--untracked-files=no") == ""  # every file of ours as committed

    other = _run(root, "bash", "tests/unit/L0_Unit_Tests_Other.sh", env={**env, "FAST": "1"})
    out = other.stdout + other.stderr
    assert "[assets] ours: built offline" in other.stdout  # this project's asset script, not the copy
    assert "is not defined" not in out  # uv ran the `--extra vllm` line ...
    assert other.stdout.count("run_unit: all selected tests passed") == 1  # ... after the first run passed,
    assert other.returncode == 2, out  # and run_unit.sh explained in one line what is missing
    assert other.stderr.splitlines()[-1].startswith(
        "run_unit: --vllm-only needs vllm, which cannot be imported (No module named 'vllm'); this project's vllm "
        "extra is empty"
    )
    assert "warnings summary" not in other.stdout  # two test_config.py, neither tracking: nothing to warn of
    record = json.loads((root / "tests" / "unit" / "unit_results.json").read_text())  # the first run's
    assert {nodeid: t["outcome"] for nodeid, t in record["tests"].items()} == {
        "tests/unit/algorithms/test_grpo.py::test_group_advantages": "passed",
        "tests/unit/algorithms/test_grpo.py::test_reject_ragged_groups": "passed",
        "tests/unit/algorithms/test_grpo.py::test_one_step": "passed",
        "tests/unit/algorithms/test_grpo_upstream.py::test_calculate_rewards_single_task": "passed",
        "tests/unit/algorithms/test_grpo_upstream.py::test_calculate_rewards_missing_environment": "passed",
        "tests/unit/test_config.py::test_load_config": "passed",
        "tests/unit/test_meta.py::test_usage_stats_disabled_in_tests": "passed",
        "tests/unit/utils/test_config.py::test_a_file_that_shares_its_name_with_ours": "passed",
    }  # and not the test the excluded list deselects, now by the copy's name

    evals = _run(root, "bash", "tests/unit/L0_Unit_Tests_Evals.sh", env=env)
    assert evals.returncode == 2, evals.stdout + evals.stderr
    assert evals.stderr.splitlines()[-1] == (  # a failure where the library lacks upstream's code, named
        "run_unit: FAILED: 1 test file(s) could not be collected: tests/unit/evals/test_eval.py: "
        "ModuleNotFoundError: No module named 'nemo_rl.evals' (see the ERROR lines above)"
    )


# ------------------------------------------------ the same with upstream's real tree and L0 script

IMPORT_PROBLEM = re.compile(
    r"(?:ModuleNotFoundError: No module named '(?P<module>[\w.]+)'"
    r"|ImportError: cannot import name '\w+' from '(?P<source>[\w.]+)'"
    r"|SyntaxError: .*)"
)


def lacked_here(error: str) -> bool:
    """Whether a collection error is this library (or this environment) lacking upstream's code:
    a module that cannot be found here (upstream's, or a package it depends on), a name that this
    checkout's nemo_rl, examples or tools lack, a syntax of a later Python."""
    import importlib.util

    found = IMPORT_PROBLEM.match(error)
    if found is None:
        return False
    if found.group("module"):
        try:
            return importlib.util.find_spec(found.group("module")) is None
        except ImportError:  # its parent package is missing too
            return True
    # a name this checkout's library, examples or tools lack (upstream's examples/run_grpo_single_controller.py)
    return found.group("source") is None or found.group("source").split(".")[0] in ("nemo_rl", "examples", "tools")


def _fresh_checkout(root: Path) -> None:
    """This checkout's working tree (tracked and new files, nothing ignored), committed in a new
    repository: what a user's fresh clone holds."""
    import shutil

    listed = subprocess.run(
        ["git", "-C", str(REPO), "ls-files", "-z", "-co", "--exclude-standard"], capture_output=True, check=True
    ).stdout.decode()
    for rel in filter(None, listed.split("\0")):
        if (REPO / rel).is_file():
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / rel, root / rel)
    _git(root, "init", "-q")
    _git(root, "add", ".")
    _git(root, "commit", "-qm", "a fresh clone")


@needs_upstream
@pytest.mark.skipif(__import__("shutil").which("uv") is None, reason="the flow runs uv")
def test_upstreams_l0_other_script_runs_to_its_own_verdict_after_the_copy_first_flow(tmp_path: Path) -> None:
    """The issue's flow, as written, with real uv (minutes: it builds the fresh copy's environment):
    copy upstream's tests/unit/. in, port-check --fix, then `bash tests/unit/L0_Unit_Tests_Other.sh`;
    and `bash tests/run_unit.sh` on a file of this project's suite still runs it."""
    import json
    import tempfile

    assert UPSTREAM is not None
    root = tmp_path / "proj"
    _fresh_checkout(root)
    subprocess.run(["cp", "-r", f"{UPSTREAM}/tests/unit/.", str(root / "tests" / "unit")], check=True)
    ray_tmp = tempfile.mkdtemp(prefix="rt", dir="/tmp")  # Ray's socket paths must stay short
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "UV_PROJECT_ENVIRONMENT", "RAY_ADDRESS")}
    env = {**env, "RAY_TMPDIR": ray_tmp}

    def sh(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(list(args), cwd=root, env=env, capture_output=True, text=True, timeout=1500)

    fixed = sh("uv", "run", "testharness", "port-check", "--fix")
    assert fixed.returncode == 0, fixed.stdout + fixed.stderr
    assert fixed.stdout.splitlines()[-1] == "port-check: no file of this project is in the way or replaced"

    other = sh("bash", "tests/unit/L0_Unit_Tests_Other.sh")
    out = other.stdout + other.stderr
    assert "is not defined" not in out and "could not be imported" not in out, out[-5000:]
    assert "run_unit: -m pytest" in out  # it reached pytest, through run_unit.sh ...
    verdict = other.stderr.splitlines()[-1] if other.returncode else other.stdout.splitlines()[-1]
    assert verdict.startswith("run_unit: "), out[-5000:]  # ... and ended with its verdict
    record = json.loads((root / "tests" / "unit" / "unit_results.json").read_text())
    errors = {nodeid: t.get("error", "") for nodeid, t in record["tests"].items() if t["outcome"] == "error"}
    assert {nodeid: e for nodeid, e in errors.items() if not lacked_here(e)} == {}
    failed = {nodeid for nodeid, t in record["tests"].items() if t["outcome"] == "failed"}
    print(f"L0_Unit_Tests_Other.sh: exit {other.returncode}; {verdict}; {len(errors)} errors, {len(failed)} failed")

    ours = sh("uv", "run", "--group", "test", "bash", "tests/run_unit.sh", "tests/unit/test_config.py")
    assert ours.returncode == 0, ours.stdout[-3000:] + ours.stderr
    assert ours.stdout.rstrip().endswith("run_unit: all selected tests passed")
