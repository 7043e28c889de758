"""An example whose policy worker fails: one line on stderr, the traceback in a log file.

In a file of its own (see tests/unit/example_runs.py).
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import TYPE_CHECKING

from tests.unit.example_runs import run_example

if TYPE_CHECKING:
    from nemo_rl.distributed.ray_cluster import ClusterInfo

_RAY_PREFIX = re.compile(r"^(\x1b\[[0-9;]*m)?\(\w+ pid=\d+")  # Ray's copy of a worker's output


def test_worker_error_is_one_line_with_the_traceback_in_a_log(
    ray_cluster: ClusterInfo, in_repo: Path, tmp_path: Path, tiny_llama: str
) -> None:
    """A model folder that passes the checks but whose weights are corrupt: the worker fails.
    The example joins the session's Ray cluster (RAY_ADDRESS, as on a cluster someone started)
    and runs its worker on the CPU there: the point is how the failure is reported, and a Ray
    cluster started and stopped for it would be most of the test's time."""
    model = tmp_path / "model"
    shutil.copytree(tiny_llama, model)
    (model / "model.safetensors").write_bytes(b"\x00\x01 not a safetensors file " * 4)
    logs = tmp_path / "logs"
    proc, _ = run_example(
        "run_sft.py",
        f"policy.model_name={model}",
        f"logger.log_dir={logs}",
        "checkpointing.enabled=false",
        "logger.monitor_gpus=false",
        "cluster.gpus_per_worker=0",
        timeout=400,
        ray_address=ray_cluster.address,
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "Started a local Ray instance" not in proc.stderr  # it joined the session's cluster
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, proc.stderr
    assert errors[0].startswith("error: policy worker (DTensorPolicyWorker.__init__) failed: SafetensorError: ")
    assert errors[0].endswith(f" (traceback: {logs / 'error.log'})")
    assert "Traceback" not in proc.stdout + proc.stderr
    ours = [
        line for line in proc.stderr.splitlines() if line.strip() and not _RAY_PREFIX.match(line) and " -- " not in line
    ]  # Ray's own log lines: "<date> INFO worker.py:N -- ..."
    assert ours == errors
    log = (logs / "error.log").read_text()
    assert "Traceback (most recent call last)" in log and "dtensor_policy_worker.py" in log
