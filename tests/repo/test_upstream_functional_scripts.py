"""Upstream NeMo RL's functional-script conventions work here.

Upstream's `tests/functional/sft.sh`, copied with only its model name and its loss threshold
changed, passes on CPU from the project root, as upstream runs it: `uv run coverage run -a
--data-file=$PROJECT_ROOT/tests/.coverage ...`, its overrides (`cluster.gpus_per_node=2`,
`policy.megatron_recipe=...`, `logger.wandb_enabled=false`, ...), then `uv run
tests/json_dump_tb_logs.py` and `uv run tests/check_metrics.py`.

The script runs in a temporary project tree: links to this checkout's code, virtual
environment and test assets, with its own tests/ (the script, its outputs, the coverage data).
UV_NO_SYNC and UV_FROZEN keep `uv run` from re-installing the project into the shared
environment from that copy; GIT_CONFIG_GLOBAL keeps the script's `git config --global` out of
your ~/.gitconfig. The command lines are upstream's.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from coverage import CoverageData

REPO = Path(__file__).resolve().parents[2]

# Upstream's tests/functional/sft.sh (NVIDIA-NeMo/RL), word for word but for two things: the
# model (Qwen/Qwen3-0.6B there, the tiny offline Llama here) and the loss threshold (5.9 there).
UPSTREAM_SFT_SH = r"""#!/bin/bash
trap "rm -rf /tmp/sft_checkpoints" EXIT
SCRIPT_DIR=$( cd -- "$( dirname -- "${BASH_SOURCE[0]}" )" &> /dev/null && pwd)
PROJECT_ROOT=$(realpath $SCRIPT_DIR/../..)
git config --global --add safe.directory $PROJECT_ROOT
set -eou pipefail
EXP_NAME=$(basename $0 .sh)
EXP_DIR=$SCRIPT_DIR/$EXP_NAME
LOG_DIR=$EXP_DIR/logs
JSON_METRICS=$EXP_DIR/metrics.json
RUN_LOG=$EXP_DIR/run.log
export PYTHONPATH=${PROJECT_ROOT}:${PYTHONPATH:-}
rm -rf $EXP_DIR $LOG_DIR
mkdir -p $EXP_DIR $LOG_DIR
cd $PROJECT_ROOT
uv run coverage run -a --data-file=$PROJECT_ROOT/tests/.coverage --source=$PROJECT_ROOT/nemo_rl \
    $PROJECT_ROOT/examples/run_sft.py \
    policy.model_name=tests/unit/test_assets/tiny_llama \
    policy.megatron_recipe=megatron.bridge.recipes.qwen.qwen3_600m_pretrain_config \
    cluster.gpus_per_node=2 \
    sft.max_num_steps=3 \
    sft.val_batches=1 \
    sft.val_period=3 \
    logger.tensorboard_enabled=true \
    logger.log_dir=$LOG_DIR \
    logger.wandb_enabled=false \
    logger.monitor_gpus=true \
    checkpointing.enabled=true \
    checkpointing.save_period=3 \
    checkpointing.checkpoint_dir=/tmp/sft_checkpoints \
    $@ \
    2>&1 | tee $RUN_LOG
uv run tests/json_dump_tb_logs.py $LOG_DIR --output_path $JSON_METRICS
uv run tests/check_metrics.py $JSON_METRICS \
  'data["train/loss"]["3"] < 6.6'
"""
THRESHOLD = 6.6  # the untrained tiny model's loss is ~7.0 (ln of its 1024-token vocabulary)

needs_uv = pytest.mark.skipif(shutil.which("uv") is None, reason="upstream's script runs uv, not on PATH here")
needs_bash = pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")


def _env(**extra: str) -> dict[str, str]:
    """This environment without an outer run's coverage hand-off, pytest or harness variables."""
    drop = ("PYTEST_", "TESTHARNESS_", "COVERAGE_")
    env = {k: v for k, v in os.environ.items() if not k.startswith(drop) and k != "VIRTUAL_ENV"}
    env.update(extra)
    return env


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A project root whose code, environment and assets are this checkout's, with its own tests/."""
    root = tmp_path / "proj"
    (root / "tests" / "functional").mkdir(parents=True)
    (root / "tests" / "unit").mkdir()
    for name in ("examples", "nemo_rl", "tools", ".venv", "pyproject.toml", "uv.lock"):
        (root / name).symlink_to(REPO / name)
    for name in ("check_metrics.py", "json_dump_tb_logs.py"):
        (root / "tests" / name).symlink_to(REPO / "tests" / name)
    # run_sft.py builds the assets in this checkout when they are missing
    (root / "tests" / "unit" / "test_assets").symlink_to(REPO / "tests" / "unit" / "test_assets")
    (root / "tests" / "functional" / "sft.sh").write_text(UPSTREAM_SFT_SH)
    return root


def _lines(data: CoverageData, module: str) -> int:
    """Measured lines of nemo_rl/<module> in a coverage data file (0 if not measured)."""
    return max((len(data.lines(f) or []) for f in data.measured_files() if f.endswith(f"nemo_rl/{module}")), default=0)


@needs_uv
@needs_bash
def test_upstreams_sft_sh_passes_from_the_project_root(project: Path, tmp_path: Path) -> None:
    proc = subprocess.run(
        ["bash", "tests/functional/sft.sh"],
        cwd=project,
        env=_env(UV_NO_SYNC="1", UV_FROZEN="1", GIT_CONFIG_GLOBAL=str(tmp_path / "gitconfig")),
        capture_output=True,
        text=True,
        timeout=600,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    assert "1/1 checks passed" in proc.stdout
    assert "Can't append" not in out

    exp = project / "tests" / "functional" / "sft"
    assert "2 worker(s)" in (exp / "run.log").read_text()  # cluster.gpus_per_node=2: two policy workers
    metrics = json.loads((exp / "metrics.json").read_text())
    assert sorted(metrics["train/loss"]) == ["1", "2", "3"] and "3" in metrics["val/loss"]  # val_period=3
    assert metrics["train/loss"]["1"] >= THRESHOLD > metrics["train/loss"]["3"]  # the check bites untrained
    assert not Path("/tmp/sft_checkpoints").exists()  # the script's trap

    # The driver's coverage, appended to upstream's data file...
    driver = CoverageData(str(project / "tests" / ".coverage"))
    driver.read()
    assert _lines(driver, "algorithms/sft.py") > 20
    # ... and each Ray worker's in a file beside it, for `coverage combine --append`.
    workers = []
    for path in (project / "tests").glob(".coverage.*"):
        data = CoverageData(str(path))
        data.read()
        workers.append(data)
    assert len(workers) >= 2, sorted(p.name for p in (project / "tests").iterdir())
    # The two policy workers ran the worker's code; other Ray workers (Ray prestarts some, and
    # they write their file too) may have only imported it, as the driver did.
    worker_code = "models/policy/workers/dtensor_policy_worker.py"
    ran_policy = [w for w in workers if _lines(w, worker_code) > _lines(driver, worker_code)]
    assert len(ran_policy) >= 2, [_lines(w, worker_code) for w in workers]


# A driver that starts a Python process as init_ray starts the job's Ray workers: with the job's
# runtime environment (under coverage: this run's config, for the children, in parallel mode).
CHILD = """
import os, subprocess, sys
from nemo_rl.distributed.ray_cluster import job_runtime_env
env = {**os.environ, **job_runtime_env().get("env_vars", {})}
subprocess.run([sys.executable, "-c", "import nemo_rl.config"], check=True, env=env)
"""


def test_coverage_run_append_works_and_measures_child_processes(tmp_path: Path) -> None:
    """The project's coverage config is not in parallel mode (`-a` works), yet a child Python
    (a Ray worker, here a plain subprocess) is measured into a file of its own."""
    script = tmp_path / "parent.py"
    script.write_text(CHILD)
    data_file = tmp_path / "cov" / ".coverage"
    data_file.parent.mkdir()
    cmd = [sys.executable, "-m", "coverage", "run", "-a", f"--data-file={data_file}", f"--source={REPO / 'nemo_rl'}"]
    for _ in range(2):  # appending to an existing file, as upstream's scripts do run after run
        proc = subprocess.run([*cmd, str(script)], cwd=REPO, env=_env(), capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stdout + proc.stderr
    driver = CoverageData(str(data_file))
    driver.read()
    assert _lines(driver, "__init__.py") > 0
    children = sorted(data_file.parent.glob(".coverage.*"))
    assert len(children) == 2  # one per run
    for path in children:
        child = CoverageData(str(path))
        child.read()
        assert _lines(child, "config.py") > 20  # the child imported nemo_rl.config: measured


def test_a_coverage_without_a_config_file_hands_nothing_on() -> None:
    """pytest-testmon measures with Coverage(config_file=False): its Ray workers stay unmeasured."""
    code = (
        "import os, coverage\n"
        "c = coverage.Coverage(data_file=None, config_file=False)\n"
        "c.start()\n"
        "from nemo_rl.distributed.ray_cluster import job_runtime_env\n"
        "env = job_runtime_env().get('env_vars', {})\n"
        "c.stop()\n"
        "print(repr(env.get('COVERAGE_PROCESS_CONFIG')))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, env=_env(), capture_output=True, text=True, timeout=60
    )
    assert (proc.returncode, proc.stdout) == (0, "None\n"), proc.stderr
