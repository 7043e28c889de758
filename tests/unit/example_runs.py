"""Running the example entry points (examples/run_sft.py, run_grpo_math.py) as a user does, for
the tests of their command line: test_examples_cli.py (configs refused before anything starts),
test_example_worker_error.py and test_example_ctrl_c.py (Ray for real). The last two are files
of their own: `-n` hands out whole files, so each runs beside the other instead of after it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"

# Runs an example as `python examples/X.py ARGS` would, then reports which heavy modules it imported.
_PROBE = """
import json, runpy, sys
script, report = sys.argv[1], sys.argv[2]
sys.argv = [script] + sys.argv[3:]
sys.path.insert(0, str(__import__("pathlib").Path(script).parent))
try:
    runpy.run_path(script, run_name="__main__")
finally:
    heavy = sorted(m for m in ("ray", "torch", "transformers") if m in sys.modules)
    open(report, "w").write(json.dumps(heavy))
"""


def example_env(ray_address: str | None = None) -> dict[str, str]:
    """An example's environment for these tests: they are about the command line (checks,
    errors, Ctrl-C), not GPU work, so the example's driver sees no GPU (tests/unit/algorithms
    runs the examples on the GPUs). Without `ray_address` it starts a Ray cluster of its own, as
    on a workstation; with it, it joins that cluster."""
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env["CUDA_VISIBLE_DEVICES"] = ""
    if ray_address:
        env["RAY_ADDRESS"] = ray_address
    return env


def run_example(
    script: str, *args: str, probe: Path | None = None, timeout: float = 120, ray_address: str | None = None
) -> tuple[subprocess.CompletedProcess[str], float]:
    """`python examples/SCRIPT ARGS` from the repository root: the finished process and its wall
    time. `probe`: a JSON file that receives the heavy modules the run imported."""
    cmd = [sys.executable, str(EXAMPLES / script), *args]
    if probe is not None:
        cmd = [sys.executable, "-c", _PROBE, str(EXAMPLES / script), str(probe), *args]
    env = example_env(ray_address)
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout, env=env, check=False)
    return proc, time.perf_counter() - t0
