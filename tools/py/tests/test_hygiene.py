"""testharness.hygiene with pytester: a leaked process (no Ray), a module fixture's process, a
hang in the test's own process, GPU memory (skips without a GPU), and no GPU reading in a
pytest started under a parallel run (a fake NVML). Real Ray scenarios are
test_hygiene_ray.py; the pure core is test_hygiene_core.py."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest
from xdist_project import env_for, run_pytest

from testharness import gpu


def test_a_leaked_child_process_is_recorded_summarised_and_an_error_with_fail_on_leak(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytester.makepyprojecttoml("[tool.testharness.hygiene]\nsettle_s = 0.5\n")  # the leak never ends
    pid_file = pytester.path / "pids"
    monkeypatch.setenv("HYGIENE_PID_FILE", str(pid_file))
    pytester.makepyfile(
        test_child="""
import os, subprocess, sys

def test_leaks_a_process():
    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    with open(os.environ["HYGIENE_PID_FILE"], "a") as fh:
        fh.write(f"{p.pid}\\n")

def test_waits_for_its_process():
    subprocess.run([sys.executable, "-c", "pass"], check=True)
"""
    )
    try:
        result = pytester.runpytest("-p", "no:cacheprovider", "--unit-results-dir", "out")
        result.assert_outcomes(passed=2)
        result.stdout.fnmatch_lines(
            [
                "*= leaks: 1 test(s) left resources behind =*",
                "test_child.py::test_leaks_a_process: 1 leak(s)",
                "    process *python* -c import time; time.sleep(600) (pid *)",
                "(--fail-on-leak*",
            ]
        )
        tests = json.loads((pytester.path / "out" / "unit_results.json").read_text())["tests"]
        (leak,) = tests["test_child.py::test_leaks_a_process"]["leaks"]
        assert leak["kind"] == "process" and leak["detail"].startswith("pid ")
        assert "leaks" not in tests["test_child.py::test_waits_for_its_process"]

        result = pytester.runpytest("-p", "no:cacheprovider", "--fail-on-leak", "--unit-results-dir", "out")
        result.assert_outcomes(passed=2, errors=1)
        result.stdout.fnmatch_lines(
            ["*ERROR at teardown of test_leaks_a_process*", "leaked 1 resource(s) after teardown: process *"]
        )
    finally:
        _kill_pids(pid_file)


def _kill_pids(pid_file: Path) -> None:
    """The processes a scenario wrote to `pid_file`: never left behind by a failed assertion."""
    for pid in pid_file.read_text().split() if pid_file.exists() else []:
        try:
            os.kill(int(pid), signal.SIGKILL)
            os.waitpid(int(pid), 0)
        except OSError:
            pass


@pytest.mark.skipif(gpu.local_gpu_count() == 0, reason="needs a GPU (NVML sees none); run it on a GPU machine")
@pytest.mark.timeout(600)
@pytest.mark.uses_cuda  # CUDA in its child; under -n no other test's actor changes the memory it reads
def test_a_test_that_leaks_gpu_memory_is_named(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    pytester.makepyprojecttoml("[tool.testharness]\n")  # the harness's project: its leak check
    pytester.makepyfile(
        test_gpu="""
import torch

HELD = []
GIB = 2**30

def test_holds_gpu_memory():
    HELD.append(torch.empty(2 * GIB, dtype=torch.uint8, device="cuda"))
    torch.cuda.synchronize()

def test_frees_its_gpu_memory():
    block = torch.empty(2 * GIB, dtype=torch.uint8, device="cuda")
    torch.cuda.synchronize()
    del block
    torch.cuda.empty_cache()
"""
    )
    # It holds the GPU (uses_cuda), so its inner run reads it even when this suite runs under -n.
    monkeypatch.delenv("PYTEST_XDIST_WORKER_COUNT", raising=False)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--unit-results-dir", "out", timeout=540)
    result.assert_outcomes(passed=2)
    tests = json.loads((pytester.path / "out" / "unit_results.json").read_text())["tests"]
    (leak,) = tests["test_gpu.py::test_holds_gpu_memory"]["leaks"]
    assert leak["kind"] == "gpu_memory" and leak["what"].startswith("GPU local:"), leak
    grew = float(leak["detail"].split()[0].lstrip("+"))
    assert grew >= 2048, leak
    assert "leaks" not in tests["test_gpu.py::test_frees_its_gpu_memory"]
    result.stdout.fnmatch_lines(["test_gpu.py::test_holds_gpu_memory: 1 leak(s)", "    gpu memory GPU local:*"])


FAKE_NVML = """
import sys, types

# One GPU whose memory grows by 2 GiB at every reading: a leak whenever the check reads it.
used = [0]
def memory_info(handle):
    used[0] += 2 * 2**30
    return types.SimpleNamespace(used=used[0])

sys.modules["pynvml"] = types.SimpleNamespace(
    nvmlInit=lambda: None, nvmlDeviceGetCount=lambda: 1,
    nvmlDeviceGetHandleByIndex=lambda i: i, nvmlDeviceGetMemoryInfo=memory_info,
)
"""


def test_gpu_memory_is_not_read_in_a_pytest_that_a_test_of_a_parallel_run_starts(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its sibling workers use the GPU at the same time (the false leak seen on the H200: an
    inner run charged with another worker's 1.1 GiB)."""
    inner = pytester.mkdir("inner")
    (inner / "pyproject.toml").write_text("[tool.testharness.hygiene]\nsettle_s = 0.2\n")
    (inner / "conftest.py").write_text(FAKE_NVML)
    (inner / "test_inner.py").write_text("def test_one():\n    pass\n")
    monkeypatch.delenv("PYTEST_XDIST_WORKER_COUNT", raising=False)  # this suite's own -n
    alone = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--unit-results-dir", "out", inner)
    alone.stdout.fnmatch_lines(["test_inner.py::test_one: 1 leak(s)", "    gpu memory GPU local:0 *"])

    pytester.makepyfile(
        test_outer="""
import subprocess, sys

def run_inner(name):
    out = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--unit-results-dir",
                          f"out_{name}", "inner"], capture_output=True, text=True).stdout
    assert "1 passed" in out, out
    assert "leak" not in out, out

def test_a():
    run_inner("a")

def test_b():
    run_inner("b")
"""
    )
    # A cluster of its own for this -n run (env_for: not this suite's RAY_ADDRESS, if it has one).
    proc = run_pytest(pytester.path, "-p", "no:cacheprovider", "-n", "2", "test_outer.py", env=env_for(pytester.path))
    assert proc.returncode == 0 and "2 passed" in proc.stdout, proc.stdout


def test_a_test_hung_in_its_own_process_fails_at_its_timeout_naming_its_line(pytester: pytest.Pytester) -> None:
    pytester.makepyprojecttoml("[tool.testharness]\n")  # the harness's project: its watchdog
    pytester.makepyfile(
        test_slow="""
import time
import pytest

@pytest.mark.timeout(1)
def test_sleeps():
    time.sleep(120)

def test_next():
    pass
"""
    )
    start = time.monotonic()
    result = pytester.runpytest("-p", "no:cacheprovider", "--unit-results-dir", "out")
    assert time.monotonic() - start < 30
    result.assert_outcomes(failed=1, passed=1)
    reason = "Timeout: the test ran over 1 s; no Ray actor was busy; test process at test_slow.py:6"
    result.stdout.fnmatch_lines([f"{reason}*"])
    hung = json.loads((pytester.path / "out" / "unit_results.json").read_text())["tests"]["test_slow.py::test_sleeps"]
    assert hung["hang"]["reason"].startswith(reason) and hung["hang"]["stacks"][0]["process"].startswith("test process")


def test_a_module_fixtures_process_is_charged_when_its_scope_ends(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytester.makepyprojecttoml("[tool.testharness.hygiene]\nsettle_s = 0.5\n")
    pid_file = pytester.path / "pids"
    monkeypatch.setenv("HYGIENE_PID_FILE", str(pid_file))
    pytester.makepyfile(
        test_fixture="""
import os, subprocess, sys
import pytest

@pytest.fixture(scope="module")
def server():
    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    with open(os.environ["HYGIENE_PID_FILE"], "a") as fh:
        fh.write(f"{p.pid}\\n")
    yield p  # never stopped

def test_first(server):
    assert server.poll() is None

def test_last(server):
    assert server.poll() is None
"""
    )
    try:
        result = pytester.runpytest("-p", "no:cacheprovider", "--unit-results-dir", "out")
        result.assert_outcomes(passed=2)
        tests = json.loads((pytester.path / "out" / "unit_results.json").read_text())["tests"]
        assert "leaks" not in tests["test_fixture.py::test_first"]  # alive while its scope lasts
        (leak,) = tests["test_fixture.py::test_last"]["leaks"]
        assert leak["kind"] == "process" and leak["owner"] == "module fixture 'server'"
        result.stdout.fnmatch_lines(["    process * (pid *) ?module fixture 'server'?"])  # [ ] are fnmatch classes
    finally:
        _kill_pids(pid_file)
