"""`-n N` GPU placement with real pytest-xdist and real Ray: Ray hands GPUs out, and a
`uses_cuda` test holds them for the CUDA that Ray does not see (a GPU is a Ray resource here:
a cluster started with `num_gpus=1` on a CPU machine hands it out exactly as on a GPU
machine). A file apart from test_parallel.py so that under -n the two run side by side.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
from xdist_project import (
    Head,
    env_for,
    make_project,
    outcomes_of,
    run_pytest,
)

# --- GPUs: Ray hands them out; uses_cuda holds them for CUDA that Ray does not see ----------

GPU_FILES = {
    # CUDA in the test process (stand-in: the interval it would use the GPU).
    "tests/test_in_process.py": textwrap.dedent("""
        import json, time
        import pytest


        @pytest.mark.uses_cuda
        def test_in_process():
            t0 = time.time(); time.sleep(3)
            open("in_process.json", "w").write(json.dumps([t0, time.time()]))
    """),
    # Ray actors that each need the (only) GPU.
    "tests/test_actors.py": textwrap.dedent("""
        import json, time


        def _hold(cluster, name):
            @cluster.remote(num_gpus=1)
            def hold():
                t0 = time.time(); time.sleep(3)
                return [t0, time.time()]
            open(name, "w").write(json.dumps(cluster.get(hold.remote())))


        def test_actor_1(cluster):
            _hold(cluster, "actor_1.json")


        def test_actor_2(cluster):
            _hold(cluster, "actor_2.json")
    """),
}


def test_one_gpu_is_never_used_by_two_tests_at_once(tmp_path: Path) -> None:
    root = make_project(tmp_path, GPU_FILES)
    proc = run_pytest(root, "-n", "2", "--dist", "load", env=env_for(root, FAKE_GPUS="1"))  # spread even one file
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "(1 GPU(s))" in proc.stdout
    spans = sorted(
        tuple(json.loads((root / f).read_text())) for f in ("in_process.json", "actor_1.json", "actor_2.json")
    )
    for (_, end), (start, _) in zip(spans, spans[1:], strict=False):
        assert end <= start, spans  # one after the other, whichever worker ran them


def test_a_lease_leaves_the_test_its_own_ray_init_and_ends_after_the_test(tmp_path: Path) -> None:
    # The lease is taken before the test's fixtures run: a test (or fixture) that calls
    # ray.init() itself must still be able to, and the next uses_cuda test must get the GPUs.
    test = textwrap.dedent("""
        import pytest


        @pytest.mark.uses_cuda
        def test_first(cluster):
            assert cluster.available_resources().get("GPU", 0) == 0  # held for this test


        @pytest.mark.uses_cuda
        def test_second(cluster):
            assert cluster.available_resources().get("GPU", 0) == 0
    """)
    root = make_project(tmp_path, {"tests/test_leases.py": test})
    env = env_for(root, FAKE_GPUS="1", TESTHARNESS_GPU_LEASE_TIMEOUT_S="60")
    proc = run_pytest(root, "-n", "1", "-rs", env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert outcomes_of(root) == {"test_first": "passed", "test_second": "passed"}


def test_without_gpus_uses_cuda_holds_nothing(tmp_path: Path, shared_head: Head) -> None:
    root = make_project(tmp_path, {"tests/test_in_process.py": GPU_FILES["tests/test_in_process.py"]})
    proc = run_pytest(root, "-n", "2", env=env_for(root, shared_head))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert outcomes_of(root) == {"test_in_process": "passed"}


@pytest.mark.skipif(
    not Path("/dev/nvidiactl").exists(), reason="needs an NVIDIA GPU (checks a real CUDA context under the lease)"
)
@pytest.mark.uses_cuda  # its nested run's CUDA is outside this run's cluster too
def test_a_real_cuda_test_holds_the_gpus_it_sees(tmp_path: Path) -> None:
    root = make_project(
        tmp_path,
        {
            "tests/test_cuda.py": textwrap.dedent("""
        import pytest, ray


        @pytest.mark.uses_cuda
        def test_cuda(cluster):
            import torch
            x = torch.ones(1024, device="cuda")
            assert float(x.sum()) == 1024
            assert ray.available_resources().get("GPU", 0) == 0  # all held for this test
    """)
        },
    )
    import torch

    proc = run_pytest(root, "-n", "2", env=env_for(root, FAKE_GPUS=str(torch.cuda.device_count())))
    assert proc.returncode == 0, proc.stdout + proc.stderr
