"""On a GPU: a test that poisons the CUDA context of the test process (a device-side assert
from an out-of-range index) fails alone; the GPU tests after it, in the same run, pass in a
fresh process, and the record names the CUDA error (issue 35). The CPU suite runs the same
flow with torch's error text: test_supervisor.py."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from records_project import read_results, run_env, write_project

from testharness import gpu

RUN_UNIT = Path(__file__).resolve().parents[3] / "tests" / "run_unit.sh"  # this repository's

GPU_TESTS = """
import torch

def _works():
    x = torch.ones(1024, device="cuda")
    assert (x * 2).sum().item() == 2048

def test_gpu_before():
    _works()

def test_out_of_range_index_on_the_gpu():
    t = torch.zeros(8, device="cuda")
    t[torch.tensor([1000], device="cuda")] = 1.0  # device-side assert: index out of bounds
    torch.cuda.synchronize()

def test_gpu_after():
    _works()

def test_gpu_after_again():
    _works()
"""


@pytest.mark.skipif(gpu.local_gpu_count() == 0, reason="needs a GPU (NVML sees none); run it on a GPU machine")
def test_a_device_side_assert_costs_one_test_and_the_gpu_tests_after_it_pass(tmp_path: Path) -> None:
    root = write_project(tmp_path, {"tests/test_gpu.py": GPU_TESTS})
    proc = subprocess.run(["bash", str(RUN_UNIT), "-p", "no:randomly"], cwd=root, env=run_env(root),
                          capture_output=True, text=True, timeout=600)  # fmt: skip
    out = proc.stdout + proc.stderr
    print(out[-4000:])
    assert proc.returncode == 1, out
    tests = read_results(root)["tests"]
    outcomes = {k.rpartition("::")[2]: v["outcome"] for k, v in tests.items()}
    assert outcomes == {
        "test_gpu_before": "passed",
        "test_out_of_range_index_on_the_gpu": "failed",
        "test_gpu_after": "passed",
        "test_gpu_after_again": "passed",
    }, out
    crash = tests["tests/test_gpu.py::test_out_of_range_index_on_the_gpu"]["crash"]
    assert "device-side assert triggered" in crash["cause"], crash
    assert "the tests after it run in a fresh process" in proc.stderr
