"""What a NeMo RL developer brings over from upstream runs unchanged (subprocess).

- a test file in upstream's style (`@pytest.mark.vllm` beside a plain test) in a project with
  this repository's pyproject.toml: the vllm test is deselected, not a "'vllm' not found in
  markers" stop; `--vllm-only` without vllm is one line and exit 2; the --*-only flags are
  mutually exclusive;
- upstream's L0 invocations: `cd tests; bash run_unit.sh unit/ --ignore=unit/...` and, from
  the root, `bash tests/run_unit.sh unit/ --ignore=unit/... --deselect unit/...::test`;
- upstream's L0 shard scripts (one per shard, sourcing a common file of exclusions, calling
  `uv run --no-sync bash -x ./tests/run_unit.sh ... --shard-id=I --num-shards=3`): the three
  shards together run every selected test exactly once; a bad shard id is exit 2;
- a test file written upstream, with upstream's fixtures (`tiny_llama_model_path`,
  `distributed_test_runner`, `tracker`, `session_data` of tests/unit/conftest.py) and a
  `@pytest.mark.vllm` test, beside upstream's vllm test file that imports vllm: `cd tests; bash
  run_unit.sh unit/models/ --ignore=unit/models/generation/test_vllm_generation.py` runs it as
  upstream would, and its metric lands under `<file stem>::<test>` in unit_results.json;
- upstream's tests/unit/test_check_metrics.py, given by path (NRL_UPSTREAM_CHECK_METRICS_TEST:
  its code is not ours to commit), passes against tests/check_metrics.py;
- upstream's tests of json_dump_tb_logs.py's --require-tag-prefix, given by path
  (NRL_UPSTREAM_JSON_DUMP_TB_LOGS_TEST: its tests/unit/utils/test_logger.py), pass against
  tests/json_dump_tb_logs.py;
- `./tests/check_metrics.py` and `./tests/json_dump_tb_logs.py` are executable (uv shebang),
  from the root and from another directory, and `uv run tests/check_metrics.py` still works.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
needs_uv = pytest.mark.skipif(shutil.which("uv") is None, reason="the command runs uv, not on PATH here")

UPSTREAM_STYLE = """\
import pytest


def test_plain():
    pass


@pytest.mark.vllm
def test_vllm_generation():
    pass


def test_dropped_by_deselect():
    raise AssertionError("the deselected test ran")
"""

IGNORED = """\
def test_in_the_ignored_folder():
    raise AssertionError("the ignored file ran")
"""


def _new_project(root: Path) -> Path:
    """This repository's pyproject.toml (its marker groups, strict markers) and run_unit.sh in
    `root`, with an empty tests/unit (returned) instead of the library's suite."""
    unit = root / "tests" / "unit"
    (unit / "models" / "generation").mkdir(parents=True)
    shutil.copy(REPO / "pyproject.toml", root / "pyproject.toml")
    shutil.copy(REPO / "tests" / "run_unit.sh", root / "tests" / "run_unit.sh")
    return unit


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A project (_new_project) whose tests/unit holds upstream-style files."""
    root = tmp_path / "proj"
    unit = _new_project(root)
    (unit / "test_upstream_style.py").write_text(UPSTREAM_STYLE)
    (unit / "models" / "generation" / "test_generation_ignored.py").write_text(IGNORED)
    return root


def _run(cwd: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    extra = env or {}
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "TESTHARNESS_"))}
    env.update(PYTHON=sys.executable, TESTHARNESS_NO_DISCOVERY="1", **extra)  # no Ray probing / asset building
    return subprocess.run(list(args), cwd=cwd, env=env, capture_output=True, text=True, timeout=180)


def _ran(project: Path) -> dict[str, str]:
    """test name -> outcome, from the run's unit_results.json (what really ran)."""
    tests = json.loads((project / "tests" / "unit" / "unit_results.json").read_text())["tests"]
    return {nodeid.split("::")[-1]: t["outcome"] for nodeid, t in tests.items()}


@pytest.mark.parametrize(
    ("where", "args"),
    [
        # upstream's run_unit.sh cds into tests/ and takes unit/... paths
        ("tests", ["bash", "run_unit.sh", "unit/", "--ignore=unit/models/generation/",
                   "--deselect", "unit/test_upstream_style.py::test_dropped_by_deselect"]),
        # upstream's L0 shard scripts call it from the root with the same arguments
        (".", ["bash", "tests/run_unit.sh", "unit/", "--ignore=unit/models/generation/",
               "--deselect=unit/test_upstream_style.py::test_dropped_by_deselect"]),
        (".", ["bash", "tests/run_unit.sh", "unit/", "--ignore", "unit/models/generation/",
               "--deselect", "unit/test_upstream_style.py::test_dropped_by_deselect"]),
    ],
    ids=["cd-tests", "root-equals", "root-two-tokens"],
)  # fmt: skip
def test_upstream_invocation_ignores_deselects_and_leaves_vllm_out(project: Path, where: str, args: list[str]) -> None:
    proc = _run(project / where, *args)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert "not found in `markers`" not in out
    assert _ran(project) == {"test_plain": "passed"}  # nor the ignored file, nor vllm's, nor the deselected
    assert "1 passed, 2 deselected" in proc.stdout
    assert proc.stdout.rstrip().endswith("run_unit: all selected tests passed")


def test_vllm_only_without_vllm_is_one_line_and_exit_2(project: Path) -> None:
    if importlib.util.find_spec("vllm") is not None:
        pytest.skip("vllm is installed here")
    proc = _run(project / "tests", "bash", "run_unit.sh", "unit/", "--vllm-only")
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert proc.stderr.splitlines() == [
        "run_unit: --vllm-only needs vllm, which cannot be imported (No module named 'vllm'); this project's vllm "
        "extra is empty (declared so that upstream's `uv run --extra vllm` lines run): nemo_rl has no vLLM backend, "
        "so no test marked vllm can run here; drop --vllm-only (those tests are deselected by default)"
    ]
    assert not (project / "tests" / "unit" / "unit_results.json").exists()  # nothing started


@pytest.mark.parametrize("flags", [("--vllm-only", "--mcore-only"), ("--sglang-only", "--nemo-gym-only")])
def test_only_flags_are_mutually_exclusive(project: Path, flags: tuple[str, ...]) -> None:
    proc = _run(project, "bash", "tests/run_unit.sh", *flags)
    assert proc.returncode == 2
    assert proc.stdout == ""
    (line,) = proc.stderr.splitlines()
    assert line.startswith("run_unit: ") and " are mutually exclusive: give one of --mcore-only, --vllm-only" in line
    assert all(flag in line.split(":")[1] for flag in flags)


# ------------------------------------------------ a test file ported from upstream

# Written as upstream's tests are: its conftest's fixtures by name, its markers, a module-level
# function for the spawned ranks, the tensor on the device the backend wants.
PORTED = """\
import pytest
import torch
import torch.distributed as dist


def test_tiny_llama_config_loads_offline(tiny_llama_model_path):
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(tiny_llama_model_path)
    assert config.model_type == "llama" and config.num_hidden_layers == 2


def _all_reduce_sum(rank, world_size):
    device = "cuda" if dist.get_backend() == "nccl" else "cpu"
    t = torch.tensor([float(rank + 1)], device=device)
    dist.all_reduce(t)
    assert t.item() == world_size * (world_size + 1) / 2


def test_all_reduce_over_two_ranks(distributed_test_runner):
    distributed_test_runner(_all_reduce_sum, world_size=2)


def test_tracker_and_session_data(tracker, session_data):
    tracker.track("loss", 0.5)
    tracker.log_max_mem("max_mem")
    assert session_data["metrics"][tracker.key]["loss"] == 0.5


@pytest.mark.vllm
def test_vllm_generate():
    import vllm  # noqa: F401
"""

# upstream's tests/unit/models/generation/test_vllm_generation.py imports vllm at module level:
# collected without vllm it is a collection error, hence its L0 scripts' --ignore.
VLLM_FILE = """\
import vllm  # noqa: F401


def test_vllm_generation():
    pass
"""


# ------------------------------------------------ upstream's L0 shard scripts (pytest-shard flags)

# Upstream's L0 scripts (tests/unit/L0_Unit_Tests_Models_{1,2,3}.sh) are one file per shard,
# identical but for --shard-id: they source a common file with the excluded tests and call
# run_unit.sh from the root with pytest-shard's flags, upstream's `unit/...` paths, `--ignore=`
# relative to tests/ and `--deselect=` relative to the root.
L0_COMMON = """\
#!/bin/bash
set -xeuo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
EXCLUDED_UNIT_TESTS=(
    --ignore=unit/models/generation/test_expensive.py
    --deselect=tests/unit/test_sharded_a.py::test_excluded
)
"""
L0_SHARD = """\
#!/bin/bash
# Shard: unit tests outside models/generation/ ({shard_id} of 3)
source "$(dirname "${{BASH_SOURCE[0]}}")/run_unit_shard_common.sh"

uv run --no-sync bash -x ./tests/run_unit.sh "unit/" "--ignore=unit/models/generation/" "${{EXCLUDED_UNIT_TESTS[@]}}" --shard-id={shard_id} --num-shards=3 --hf-gated
"""
SHARDED_A = """\
import pytest


@pytest.mark.parametrize("case", range(6))
def test_case(case):
    pass


def test_excluded():
    raise AssertionError("the excluded test ran")


@pytest.mark.hf_gated
def test_gated():
    pass


@pytest.mark.vllm
def test_vllm_generation():
    pass
"""
SHARDED_B = """\
def test_one():
    pass


def test_two():
    pass
"""


@pytest.fixture
def l0_project(tmp_path: Path) -> Path:
    """A project (_new_project) with 9 tests to shard, one excluded, one vllm-marked, one in
    the ignored generation folder, and upstream-style L0 scripts for shards 0, 1 and 2 of 3."""
    root = tmp_path / "proj"
    unit = _new_project(root)
    (unit / "test_sharded_a.py").write_text(SHARDED_A)
    (unit / "models" / "test_sharded_b.py").write_text(SHARDED_B)
    (unit / "models" / "generation" / "test_generation_ignored.py").write_text(IGNORED)
    (unit / "run_unit_shard_common.sh").write_text(L0_COMMON)
    for shard_id in range(3):
        (unit / f"L0_Unit_Tests_Sharded_{shard_id + 1}.sh").write_text(L0_SHARD.format(shard_id=shard_id))
    return root


@needs_uv
def test_upstream_l0_shard_scripts_cover_the_suite_exactly_once(l0_project: Path) -> None:
    ran: list[str] = []
    for shard_id in range(3):
        # `uv run --no-sync` in the project runs this checkout's environment, as it would upstream's
        proc = _run(
            l0_project,
            "bash",
            f"tests/unit/L0_Unit_Tests_Sharded_{shard_id + 1}.sh",
            env={"UV_PROJECT_ENVIRONMENT": sys.prefix},
        )
        out = proc.stdout + proc.stderr
        assert proc.returncode == 0, out
        assert "unrecognized arguments" not in out
        assert proc.stdout.rstrip().endswith("run_unit: all selected tests passed"), out
        record = json.loads((l0_project / "tests" / "unit" / "unit_results.json").read_text())
        assert record["shard"] == f"{shard_id + 1}/3"
        outcomes = {nodeid: t["outcome"] for nodeid, t in record["tests"].items()}
        assert set(outcomes.values()) == {"passed"}, outcomes
        ran += outcomes
    expected = [f"tests/unit/test_sharded_a.py::test_case[{i}]" for i in range(6)] + [
        "tests/unit/test_sharded_a.py::test_gated",
        "tests/unit/models/test_sharded_b.py::test_one",
        "tests/unit/models/test_sharded_b.py::test_two",
    ]  # not the excluded, vllm-marked or ignored ones
    assert sorted(ran) == sorted(expected)  # each test once: no shard missed or repeated one


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (
            ["--shard-id=3", "--num-shards=3"],
            "ERROR: --shard-id 3 --num-shards 3: the shard id must be between 0 and 2",
        ),
        (["--shard", "1/3", "--num-shards=3"], "ERROR: --shard and --shard-id/--num-shards both choose a shard"),
    ],
)
def test_a_bad_shard_id_stops_run_unit_with_exit_2(l0_project: Path, flags: list[str], message: str) -> None:
    proc = _run(l0_project, "bash", "tests/run_unit.sh", *flags)
    assert proc.returncode == 2
    assert message in proc.stderr
    assert proc.stderr.rstrip().endswith("run_unit: pytest rejected the arguments (see the error above)")
    assert not (l0_project / "tests" / "unit" / "unit_results.json").exists()  # nothing ran


@pytest.fixture
def ported(tmp_path: Path) -> Path:
    """A project (_new_project) with this repository's tests/unit/conftest.py (upstream's fixture
    names) and test assets (a link: built once, by the library's suite or this run), and a
    file ported from upstream in tests/unit/models/policy/ beside upstream's vllm test file."""
    root = tmp_path / "proj"
    unit = _new_project(root)
    (root / "tests" / "__init__.py").touch()
    for name in ("__init__.py", "conftest.py", "prepare_unit_test_assets.py"):
        shutil.copy(REPO / "tests" / "unit" / name, unit / name)
    (unit / "test_assets").symlink_to(REPO / "tests" / "unit" / "test_assets", target_is_directory=True)
    (unit / "models" / "policy").mkdir()
    (unit / "models" / "policy" / "test_ported_from_upstream.py").write_text(PORTED)
    (unit / "models" / "generation" / "test_vllm_generation.py").write_text(VLLM_FILE)
    return root


def test_a_test_file_ported_from_upstream_runs_as_upstream_would(ported: Path) -> None:
    ignored = "unit/models/generation/test_vllm_generation.py"
    proc = _run(ported / "tests", "bash", "run_unit.sh", "unit/models/", f"--ignore={ignored}")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert (
        f"run_unit: -m pytest --durations=15 --continue-on-collection-errors unit/models/ --ignore={ignored}\n"
        in proc.stdout
    )
    assert "3 passed, 1 deselected" in proc.stdout  # the vllm-marked test: deselected, not an error
    assert proc.stdout.rstrip().endswith("run_unit: all selected tests passed")
    record = json.loads((ported / "tests" / "unit" / "unit_results.json").read_text())
    ran = {nodeid: t["outcome"] for nodeid, t in record["tests"].items()}
    expected = [
        "test_tiny_llama_config_loads_offline",
        "test_all_reduce_over_two_ranks",
        "test_tracker_and_session_data",
    ]
    # nothing of the ignored file (which would not even import), nor the vllm-marked test
    assert ran == {f"tests/unit/models/policy/test_ported_from_upstream.py::{name}": "passed" for name in expected}
    metrics = record["metrics"]["test_ported_from_upstream::test_tracker_and_session_data"]
    assert metrics["loss"] == 0.5 and metrics["max_mem"] > 0 and record["memory_unit"] == "MiB"


def test_vllm_only_in_the_ported_project_is_one_line_and_exit_2(ported: Path) -> None:
    if importlib.util.find_spec("vllm") is not None:
        pytest.skip("vllm is installed here")
    proc = _run(ported / "tests", "bash", "run_unit.sh", "unit/models/policy/", "--vllm-only")
    assert (proc.returncode, proc.stdout, len(proc.stderr.splitlines())) == (2, "", 1), proc.stderr
    assert proc.stderr.startswith("run_unit: --vllm-only needs vllm, which cannot be imported")


# upstream's own tests of check_metrics.py (its tests/unit/test_check_metrics.py, which inserts
# its parent's parent into sys.path and imports check_metrics from there)
UPSTREAM_CHECK_METRICS_TEST = os.environ.get("NRL_UPSTREAM_CHECK_METRICS_TEST")


@pytest.mark.skipif(
    not UPSTREAM_CHECK_METRICS_TEST,
    reason="set NRL_UPSTREAM_CHECK_METRICS_TEST to a copy of upstream's tests/unit/test_check_metrics.py",
)
def test_upstreams_check_metrics_tests_pass_unchanged(tmp_path: Path) -> None:
    """Every test passes but those that read a file of upstream's repository that this one does
    not have (tests/test_suites/...: its nightly scripts), which error with FileNotFoundError."""
    import xml.etree.ElementTree as ET

    assert UPSTREAM_CHECK_METRICS_TEST
    (tmp_path / "unit").mkdir()
    shutil.copy(UPSTREAM_CHECK_METRICS_TEST, tmp_path / "unit" / "test_check_metrics.py")
    (tmp_path / "check_metrics.py").symlink_to(REPO / "tests" / "check_metrics.py")
    junit = tmp_path / "junit.xml"
    _run(tmp_path, sys.executable, "-m", "pytest", "-p", "no:cacheprovider", f"--junitxml={junit}", "unit")
    cases = ET.parse(junit).getroot().iter("testcase")
    outcomes: dict[str, str] = {}
    for case in cases:
        problem = next(iter(case.findall("failure") + case.findall("error") + case.findall("skipped")), None)
        name = f"{case.get('classname')}::{case.get('name')}"
        if problem is None:
            outcomes[name] = "passed"
        elif problem.tag == "error" and "FileNotFoundError" in (problem.get("message") or "") + (problem.text or ""):
            outcomes[name] = "needs upstream's files"
            assert "test_suites/" in (problem.text or ""), problem.text
        else:
            outcomes[name] = f"{problem.tag}: {problem.get('message')}"
    assert outcomes and set(outcomes.values()) <= {"passed", "needs upstream's files"}, {
        k: v for k, v in outcomes.items() if v != "passed"
    }


# upstream's own tests of json_dump_tb_logs.py's --require-tag-prefix, given by path: at 7ea279a a
# method of tests/unit/utils/test_logger.py, whose other tests import upstream's logger classes
UPSTREAM_TB_DUMP_TEST = os.environ.get("NRL_UPSTREAM_JSON_DUMP_TB_LOGS_TEST")


def tag_prefix_tests(source: str) -> str:
    """The tests of `source` (a test file) with `tag_prefix` in their name, each as written (a
    method inside its class, decorators included), under the file's imports of anything but
    nemo_rl: a module that runs them without upstream's library."""
    import ast

    tree, lines = ast.parse(source), source.splitlines()

    def text(node: ast.stmt) -> str:
        first = min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", []))])
        return "\n".join(lines[first - 1 : node.end_lineno])

    def library(node: ast.Import | ast.ImportFrom) -> bool:
        names = [node.module or ""] if isinstance(node, ast.ImportFrom) else [a.name for a in node.names]
        return any(n.split(".")[0] == "nemo_rl" for n in names)

    parts = [text(n) for n in tree.body if isinstance(n, ast.Import | ast.ImportFrom) and not library(n)]
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and "tag_prefix" in node.name:
            parts.append(text(node))
        elif isinstance(node, ast.ClassDef):
            methods = [m for m in node.body if isinstance(m, ast.FunctionDef) and "tag_prefix" in m.name]
            if methods:
                parts.append(f"class {node.name}:\n" + "\n\n".join(text(m) for m in methods))
    return "\n\n\n".join(parts) + "\n"


@pytest.mark.skipif(
    not UPSTREAM_TB_DUMP_TEST,
    reason="set NRL_UPSTREAM_JSON_DUMP_TB_LOGS_TEST to upstream's tests/unit/utils/test_logger.py (or another file "
    "with its tests of --require-tag-prefix)",
)
def test_upstreams_json_dump_tag_prefix_tests_pass_unchanged(tmp_path: Path) -> None:
    """Its tests of --require-tag-prefix (`tag_prefix` in their name), cut out of the file unchanged,
    pass, run from tests/unit/utils/ of a root that holds tests/json_dump_tb_logs.py, as
    upstream's checkout does (they find the script at Path(__file__).parents[2])."""
    assert UPSTREAM_TB_DUMP_TEST
    source = Path(UPSTREAM_TB_DUMP_TEST)
    (tmp_path / "tests" / "unit" / "utils").mkdir(parents=True)
    (tmp_path / "tests" / "unit" / "utils" / source.name).write_text(tag_prefix_tests(source.read_text()))
    (tmp_path / "tests" / "json_dump_tb_logs.py").symlink_to(REPO / "tests" / "json_dump_tb_logs.py")
    proc = _run(
        tmp_path,
        sys.executable,
        "-m",
        "pytest",
        "-p",
        "no:cacheprovider",
        "-q",
        "-rA",
        f"tests/unit/utils/{source.name}",
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode != pytest.ExitCode.NO_TESTS_COLLECTED, f"no test of --require-tag-prefix in {source}"
    assert proc.returncode == 0, out
    assert " passed" in proc.stdout and " failed" not in proc.stdout, out


def test_a_collection_error_is_named_so(project: Path) -> None:
    (project / "tests" / "unit" / "test_broken.py").write_text("import no_such_module_xyz\n")
    proc = _run(project, "bash", "tests/run_unit.sh")
    assert proc.returncode == 2
    assert " 1 error in " in proc.stdout and "Interrupted" not in proc.stdout  # the other files ran
    assert proc.stderr.splitlines()[-1] == (
        "run_unit: FAILED: 1 test file(s) could not be collected: tests/unit/test_broken.py: "
        "ModuleNotFoundError: No module named 'no_such_module_xyz' (see the ERROR lines above)"
    )
    assert "Ctrl-C" not in proc.stdout + proc.stderr


# ------------------------------------------------ check_metrics.py, json_dump_tb_logs.py

SCRIPTS = ["tests/check_metrics.py", "tests/json_dump_tb_logs.py"]


@pytest.mark.parametrize("script", SCRIPTS)
def test_entry_points_are_executable_with_a_uv_shebang(script: str) -> None:
    assert os.access(REPO / script, os.X_OK)
    assert (REPO / script).read_text().splitlines()[0] == "#!/usr/bin/env -S uv run"
    staged = subprocess.run(["git", "ls-files", "--stage", script], cwd=REPO, capture_output=True, text=True)
    if staged.returncode == 0:  # in a git checkout (not an exported tree): the mode a clone gets
        assert staged.stdout.split()[0] == "100755"


@needs_uv
@pytest.mark.parametrize("script", SCRIPTS)
def test_entry_points_run_from_the_root_and_from_elsewhere(script: str, tmp_path: Path) -> None:
    for cwd, path in [(REPO, f"./{script}"), (tmp_path, str(REPO / script))]:
        proc = _run(cwd, path, "--help")
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.startswith(f"usage: {Path(script).name}")


@needs_uv
def test_check_metrics_checks_from_another_directory_and_through_uv_run(tmp_path: Path) -> None:
    (tmp_path / "metrics.json").write_text('{"train/loss": {"1": 2.0, "2": 1.0}}')
    ok, bad = 'data["train/loss"]["2"] < 1.5', 'data["train/loss"]["2"] > 1.5'
    assert _run(tmp_path, str(REPO / "tests/check_metrics.py"), "metrics.json", ok).returncode == 0
    assert _run(tmp_path, str(REPO / "tests/check_metrics.py"), "metrics.json", bad).returncode == 1
    # upstream's spelling, from the root
    proc = _run(REPO, "uv", "run", "tests/check_metrics.py", str(tmp_path / "metrics.json"), ok)
    assert proc.returncode == 0, proc.stderr
