"""The small projects that the `-n` tests (test_parallel*.py) run with real pytest-xdist
and real Ray: files, environment, a pytest subprocess, its results, and `shared_head`, the Ray
cluster that runs join through RAY_ADDRESS: this run's own under -n, else one a helper process
holds (a fixture; conftest.py offers it to the test files).
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import pytest

from testharness import gpu

RUN_UNIT = Path(__file__).resolve().parents[3] / "tests" / "run_unit.sh"  # this repository's
PLUGIN = ["-p", "testharness.parallel"]  # as where the harness is not installed (-p, never twice)

PYPROJECT = """
[tool.testharness]
source_packages = ["mylib"]
results_dir = "out"
test_roots = ["tests"]
remote_map_file = ".sel_map.json"
remote_state_file = ".sel_state.json"

[tool.testharness.marker_groups.hf_gated]
option = "--hf-gated"
mode = "opt-in"
args = "model_id"
description = "needs a gated Hugging Face model"
hf_models = true

[tool.testharness.marker_groups.mcore]
option = "--mcore-only"
mode = "only"
description = "needs megatron-core"
requires = ["megatron.core"]
requires_name = "megatron-core"

[tool.pytest.ini_options]
testpaths = ["tests"]

[tool.coverage.run]
patch = ["subprocess"]  # Ray workers measured too (as in this repository)
"""

# The project's start-up hook: a cluster of 4 CPUs and FAKE_GPUS logical GPUs, and a trace.
ROOT_CONFTEST = """
import os
from pathlib import Path

pytest_plugins = ["testharness.plugin"]


def pytest_testharness_start_ray(config, workers):
    import ray

    Path("STARTED_BY_HOOK").write_text(str(workers))
    for attempt in range(3):  # a loaded machine: Ray's own start-up waits can run out
        try:
            # The machine's own address, not 127.0.0.1: the workers join it, and a joiner turns
            # 127.0.0.1 into that address, which Ray 2.46's GCS does not listen on (2.60's does).
            ray.init(address="local", num_cpus=4, num_gpus=int(os.environ.get("FAKE_GPUS", "0")),
                     include_dashboard=False)
            return ray.get_runtime_context().gcs_address
        except Exception:
            ray.shutdown()
            if attempt == 2:
                raise
"""

TESTS_CONFTEST = """
import os
import pytest


@pytest.fixture(scope="session")
def cluster():
    import ray

    ray.init(address=os.environ.get("RAY_ADDRESS") or "local", include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()
"""

ACTOR_FILES = {
    "mylib/__init__.py": "",
    "mylib/helper.py": "def scale(x):\n    return x * 2\n",
    "mylib/worker.py": textwrap.dedent("""
        from mylib.helper import scale


        class Doubler:
            def run(self, x):
                return scale(x)


        def describe():
            return "doubler"
    """),
    "tests/test_actor.py": textwrap.dedent("""
        import os

        import psutil
        from mylib.worker import Doubler


        def test_actor(cluster, tracker):
            actor = cluster.remote(Doubler).remote()
            assert cluster.get(actor.run.remote(3)) == 6
            tracker.track("gcs", cluster.get_runtime_context().gcs_address)
            tracker.track("pid", os.getpid())
            tracker.log_max_mem("mem")
            # A graceful exit runs the worker's atexit handlers (coverage saves its data
            # there); the cluster's shutdown kills workers still running (a busy machine).
            pid = cluster.get(actor.__ray_call__.remote(lambda self: os.getpid()))
            actor.__ray_terminate__.remote()
            try:
                psutil.Process(pid).wait(timeout=120)
            except psutil.NoSuchProcess:
                pass
    """),
    "tests/test_local.py": textwrap.dedent("""
        import os
        from mylib.worker import describe


        def test_local(cluster, tracker):
            assert describe() == "doubler"
            tracker.track("gcs", cluster.get_runtime_context().gcs_address)
            tracker.track("pid", os.getpid())
    """),
}


def make_project(root: Path, files: dict[str, str]) -> Path:
    (root / "pyproject.toml").write_text(PYPROJECT)
    (root / "conftest.py").write_text(ROOT_CONFTEST)
    (root / "tests").mkdir(exist_ok=True)
    (root / "tests" / "conftest.py").write_text(TESTS_CONFTEST)
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def env_for(root: Path, head: Head | None = None, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "TESTHARNESS_", "RAY_ADDRESS", "COV_"))}
    env.update(PYTHONPATH=os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")])),
               RAY_ENABLE_UV_RUN_RUNTIME_ENV="0", HF_HUB_OFFLINE="1",
               TESTHARNESS_ROOT=str(root), TESTHARNESS_NO_DISCOVERY="1")  # fmt: skip
    env.update(extra)
    env["RAY_TMPDIR"] = (
        head.ray_tmpdir if head else tempfile.mkdtemp(prefix="par_ray_", dir="/tmp")
    )  # short: socket paths
    if head:
        # A cluster that ray.init started asks for Ray's token (~/.ray/auth_token); a process
        # that did not start it sends the token only when told to.
        env.update(RAY_ADDRESS=head.address, RAY_AUTH_MODE="token")
    return env


def run_logged(cmd: list[str], root: Path, env: dict[str, str], timeout: float) -> subprocess.CompletedProcess[str]:
    """Output to a file, not a pipe: a Ray process that outlived the run (the failure some
    tests look for) must not keep us reading forever."""
    with tempfile.TemporaryFile("w+") as out:
        proc = subprocess.run(
            cmd, cwd=root, env=env, stdout=out, stderr=subprocess.STDOUT, text=True, timeout=timeout, check=False
        )
        out.seek(0)
        return subprocess.CompletedProcess(cmd, proc.returncode, out.read(), "")


def run_pytest(
    root: Path, *args: str, env: dict[str, str] | None = None, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "pytest", *PLUGIN, "-rA", *args]
    return run_logged(cmd, root, env or env_for(root), timeout)


def results_of(root: Path, out: str = "out") -> dict[str, Any]:
    return json.loads((root / out / "unit_results.json").read_text())


def outcomes_of(root: Path, out: str = "out") -> dict[str, str]:
    return {k.split("::", 1)[1]: v["outcome"] for k, v in results_of(root, out)["tests"].items()}


def ray_processes(ray_tmpdir: str) -> list[str]:
    """Processes of the Ray cluster(s) whose session files are under `ray_tmpdir`."""
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        try:
            if any(ray_tmpdir in part for part in proc.info["cmdline"] or []):
                found.append(" ".join(proc.info["cmdline"])[:120])
        except psutil.Error:
            continue
    return found


@dataclass(frozen=True)
class Head:
    address: str
    ray_tmpdir: str  # a joiner needs it: Ray's session token is found there


@contextlib.contextmanager
def held_head(num_gpus: int | None = None) -> Iterator[Head]:
    """A Ray cluster of 4 CPUs (and `num_gpus` logical GPUs; None: the machine's) held by a
    helper process, for runs that join RAY_ADDRESS."""
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env["RAY_TMPDIR"] = tempfile.mkdtemp(prefix="par_head_", dir="/tmp")
    code = (
        # The machine's own address (not 127.0.0.1: a joiner turns it into that, where 2.46's GCS is not).
        f"import sys, ray; ray.init(num_cpus=4, num_gpus={num_gpus!r}, include_dashboard=False); "
        "print(ray.get_runtime_context().gcs_address, flush=True); sys.stdin.read(); ray.shutdown()"
    )
    for _attempt in range(3):  # a loaded machine: Ray's own start-up waits can run out
        proc = subprocess.Popen(
            [sys.executable, "-c", code], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        address = proc.stdout.readline().strip() if proc.stdout else ""
        if address:
            break
        proc.wait(timeout=120)
    assert address, "the helper's Ray cluster did not start (3 attempts)"
    try:
        yield Head(address, env["RAY_TMPDIR"])
    finally:
        if proc.stdin:
            proc.stdin.close()
        proc.wait(timeout=120)


@pytest.fixture(scope="module")
def shared_head() -> Iterator[Head]:
    """A Ray cluster for runs that join RAY_ADDRESS. Under `-n` (this suite's usual way) this
    run's own: its xdist worker joined it (RAY_ADDRESS), and it is shared by jobs as any `-n`
    run's is, so a module costs no Ray start. Else (no -n, or a GPU machine, where the runs'
    GPU leases would wait for this run's own `uses_cuda` tests) one a helper process holds."""
    if os.environ.get("RAY_ADDRESS") and not gpu.local_gpu_count():
        yield Head(os.environ["RAY_ADDRESS"], os.environ.get("RAY_TMPDIR") or tempfile.gettempdir())
        return
    with held_head() as head:
        yield head
