"""GPU counting for the clusters the library starts, and the runtime environment of its jobs."""

from __future__ import annotations

import pytest

from nemo_rl.distributed.ray_cluster import FORWARDED_ENV, job_runtime_env, visible_gpu_count


@pytest.mark.parametrize(
    "visible, expected",
    [
        (None, 8),  # unset: every GPU
        ("", 0),  # hides them all (how the tests run an example on the CPU)
        ("-1", 0),
        ("0", 1),
        ("2,5", 2),
        ("0,1,-1,3", 2),  # CUDA stops at the first invalid entry
        ("GPU-01436b86-e8f4-6356-8007-51b665c38c3f", 1),  # UUIDs count like indices
        ("0,1,2,3,4,5,6,7,8,9", 8),  # never more than the machine has
    ],
)
def test_cuda_visible_devices_limits_the_count(visible: str | None, expected: int) -> None:
    assert visible_gpu_count(8, visible) == expected


def test_a_job_carries_the_forwarded_environment_and_the_warm_hook_only_when_asked(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in FORWARDED_ENV:
        monkeypatch.delenv(name, raising=False)
    assert job_runtime_env() == {}  # nothing to forward: Ray's own default environment
    monkeypatch.setenv("PYTHONPATH", "/checkout")
    monkeypatch.setenv("NCCL_NVLS_ENABLE", "0")
    monkeypatch.setenv("UNRELATED", "1")
    assert job_runtime_env() == {"env_vars": {"PYTHONPATH": "/checkout", "NCCL_NVLS_ENABLE": "0"}}
    warm = job_runtime_env(warm_workers=2)
    assert warm["worker_process_setup_hook"] == "nemo_rl.distributed.warm_workers.preload_if_claimed"
    assert warm["env_vars"] == {"PYTHONPATH": "/checkout", "NCCL_NVLS_ENABLE": "0"}
