"""`-n N` GPU placement with real pytest-xdist and real Ray: Ray hands GPUs out, and a
`uses_cuda` test holds what it uses for the CUDA that Ray does not see: a quarter of a one-GPU
node, every GPU of a larger one (a GPU is a Ray resource here:
a cluster started with `num_gpus=1` on a CPU machine hands it out exactly as on a GPU
machine). A file apart from test_parallel.py so that under -n the two run side by side.

The runs join one fake-GPU cluster that a helper holds for the module (`one_gpu_head`): the
controller's own start is test_parallel.py's subject, and one lease test still lets it start
a two-GPU cluster. Sharing it, each run also shows that the one before gave back its GPU.
"""

from __future__ import annotations

import json
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
from xdist_project import (
    Head,
    env_for,
    held_head,
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


@pytest.fixture(scope="module")
def one_gpu_head() -> Iterator[Head]:
    """A cluster with one (logical) GPU, joined by this module's one-GPU runs."""
    with held_head(num_gpus=1) as head:
        yield head


def test_one_gpu_is_never_used_by_two_tests_at_once(tmp_path: Path, one_gpu_head: Head) -> None:
    root = make_project(tmp_path, GPU_FILES)
    proc = run_pytest(root, "-n", "2", "--dist", "load", env=env_for(root, one_gpu_head))  # spread even one file
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "(1 GPU(s))" in proc.stdout
    spans = sorted(
        tuple(json.loads((root / f).read_text())) for f in ("in_process.json", "actor_1.json", "actor_2.json")
    )
    for (_, end), (start, _) in zip(spans, spans[1:], strict=False):
        assert end <= start, spans  # one after the other, whichever worker ran them


@pytest.mark.parametrize(("gpus", "left"), [("1", 0.75), ("2", 0)])
def test_a_lease_leaves_the_test_its_own_ray_init_and_ends_after_the_test(
    tmp_path: Path, request: pytest.FixtureRequest, gpus: str, left: float
) -> None:
    # The lease is taken before the test's fixtures run: a test (or fixture) that calls
    # ray.init() itself must still be able to, and the next uses_cuda test must get its share.
    # A quarter of a one-GPU node is held, every GPU of a larger one.
    test = textwrap.dedent(f"""
        import time

        import pytest


        def gpus_left(cluster):
            deadline = time.monotonic() + 30  # the first test's lease ends soon after that test
            while cluster.available_resources().get("GPU", 0) != {left} and time.monotonic() < deadline:
                time.sleep(0.1)
            return cluster.available_resources().get("GPU", 0)


        @pytest.mark.uses_cuda
        def test_first(cluster):
            assert cluster.available_resources().get("GPU", 0) == {left}  # the rest is held for this test


        @pytest.mark.uses_cuda
        def test_second(cluster):
            assert gpus_left(cluster) == {left}
    """)
    root = make_project(tmp_path, {"tests/test_leases.py": test})
    # One GPU: the module's cluster; two: the controller starts one (FAKE_GPUS, the project's hook).
    head = request.getfixturevalue("one_gpu_head") if gpus == "1" else None
    env = env_for(root, head, FAKE_GPUS=gpus, TESTHARNESS_GPU_LEASE_TIMEOUT_S="60")
    proc = run_pytest(root, "-n", "1", "-rs", env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert outcomes_of(root) == {"test_first": "passed", "test_second": "passed"}


def test_cuda_tests_share_a_one_gpu_node(tmp_path: Path, one_gpu_head: Head) -> None:
    # Each holds a quarter: two run at the same time instead of taking the GPU in turn.
    in_process = GPU_FILES["tests/test_in_process.py"]
    root = make_project(tmp_path, {
        "tests/test_in_process.py": in_process,
        "tests/test_in_process_2.py": in_process.replace("in_process", "in_process_2"),
    })  # fmt: skip
    proc = run_pytest(root, "-n", "2", env=env_for(root, one_gpu_head))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (start_1, end_1), (start_2, end_2) = (
        json.loads((root / f).read_text()) for f in ("in_process.json", "in_process_2.json")
    )
    assert start_1 < end_2 and start_2 < end_1, "the two uses_cuda tests did not overlap"


def test_without_gpus_uses_cuda_holds_nothing(tmp_path: Path, shared_head: Head) -> None:
    root = make_project(tmp_path, {"tests/test_in_process.py": GPU_FILES["tests/test_in_process.py"]})
    proc = run_pytest(root, "-n", "2", env=env_for(root, shared_head))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert outcomes_of(root) == {"test_in_process": "passed"}


@pytest.mark.skipif(
    not Path("/dev/nvidiactl").exists(), reason="needs an NVIDIA GPU (checks a real CUDA context under the lease)"
)
@pytest.mark.uses_cuda  # its nested run's CUDA is outside this run's cluster too
def test_a_real_cuda_test_holds_its_share_of_the_gpus_it_sees(tmp_path: Path) -> None:
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
            held = 0.25 if torch.cuda.device_count() == 1 else torch.cuda.device_count()
            assert ray.available_resources().get("GPU", 0) == torch.cuda.device_count() - held
    """)
        },
    )
    import torch

    proc = run_pytest(root, "-n", "2", env=env_for(root, FAKE_GPUS=str(torch.cuda.device_count())))
    assert proc.returncode == 0, proc.stdout + proc.stderr
