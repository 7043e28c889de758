"""GPU memory as the tracker and the logger's GPU monitor see it (GPU machines only)."""

import pytest
import ray

from nemo_rl.utils.gpu_monitor import GpuMonitor
from tests.unit.policy_helpers import SHARED_GPU_FRACTION

GIB = 2**30


@pytest.mark.num_gpus(1)
@pytest.mark.uses_cuda  # CUDA in the test process: under -n Ray counts the share it uses
def test_tracker_sees_gpu_memory_grow_in_the_test_process(tracker) -> None:
    import torch

    before = tracker.get_max_mem()
    block = torch.empty(6 * GIB, dtype=torch.uint8, device="cuda")
    torch.cuda.synchronize()
    tracker.log_max_mem("memory_after_6gib")
    growth = tracker.get_max_mem() - before
    tracker.track("growth_mib", growth)
    del block
    torch.cuda.empty_cache()
    assert growth >= 5 * 1024


# A share of a GPU, as the other tests' actors: under -n they may allocate on it meanwhile, and
# the tracker reads this test's own processes (testharness.gpu_processes).
@ray.remote(num_gpus=SHARED_GPU_FRACTION)
class _Holder:
    def ready(self) -> bool:
        return True

    def hold(self, gib: int) -> int:
        import torch

        self.block = torch.empty(gib * GIB, dtype=torch.uint8, device="cuda")
        torch.cuda.synchronize()
        return int(self.block.numel())


@pytest.mark.num_gpus(1)
def test_tracker_sees_memory_held_by_a_ray_actor(ray_cluster, tracker) -> None:
    holder = _Holder.remote()  # type: ignore[attr-defined]
    ray.get(holder.ready.remote())  # started: its CUDA context comes with its first allocation
    before = tracker.get_max_mem()
    ray.get(holder.hold.remote(8))
    growth = tracker.get_max_mem() - before
    tracker.track("growth_mib", growth)
    monitor = GpuMonitor(interval_s=0).collect(force=True)
    ray.kill(holder)
    assert growth >= 7 * 1024
    assert any(k.endswith("/memory_used_mib") and v >= 8 * 1024 for k, v in monitor.items())
