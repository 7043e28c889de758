"""Upstream NeMo RL's conftest fixtures, used as upstream's tests use them (tests/unit/conftest.py)."""

from __future__ import annotations

import functools
import os
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

TINY_MODELS = {  # fixture -> (model_type, tied embeddings)
    "tiny_llama_model_path": ("llama", False),
    "tiny_llama_tied_model_path": ("llama", True),
    "tiny_qwen2_model_path": ("qwen2", False),
    "tiny_qwen3_model_path": ("qwen3", False),
    "tiny_gemma3_model_path": ("gemma3_text", True),
    "tiny_nemotron5_h_model_path": ("nemotron_h", False),
}


@pytest.mark.parametrize("fixture", list(TINY_MODELS))
def test_tiny_model_path_loads_offline_with_its_tokenizer(request: pytest.FixtureRequest, fixture: str) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model_path = request.getfixturevalue(fixture)
    model_type, tied = TINY_MODELS[fixture]
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    model = AutoModelForCausalLM.from_pretrained(model_path)
    assert model.config.model_type == model_type
    assert model.config.vocab_size == len(tokenizer)
    output, embed = model.get_output_embeddings(), model.get_input_embeddings()
    assert isinstance(output, torch.nn.Linear) and isinstance(embed, torch.nn.Embedding)
    assert (output.weight.data_ptr() == embed.weight.data_ptr()) is tied
    text = tokenizer.apply_chat_template(
        [{"role": "user", "content": "What is 2 + 3?"}], add_generation_prompt=True, tokenize=False
    )
    input_ids = tokenizer(text, return_tensors="pt", add_special_tokens=False).input_ids
    with torch.no_grad():
        logits = model(input_ids).logits
    assert logits.shape == (1, input_ids.shape[1], len(tokenizer))
    assert torch.isfinite(logits).all()


def test_upstream_paths_are_the_project_assets(
    tiny_llama_model_path: str, tiny_llama: str, tiny_qwen2_model_path: str, tiny_qwen2: str
) -> None:
    assert tiny_llama_model_path == tiny_llama and tiny_qwen2_model_path == tiny_qwen2


# ---------------------------------------------------------------- distributed_test_runner


def _all_reduce_sum(rank: int, world_size: int, out_dir: Path) -> None:
    device = "cuda" if dist.get_backend() == "nccl" else "cpu"
    t = torch.tensor([float(rank + 1)], device=device)
    dist.all_reduce(t)
    assert t.item() == world_size * (world_size + 1) / 2
    (out_dir / f"rank{rank}").write_text(f"{os.getpid()} {dist.get_backend()} {t.item()}")


def _rank_one_fails(rank: int, world_size: int) -> None:
    if rank == 1:
        raise AssertionError("rank 1 saw a wrong sum")
    dist.barrier()  # rank 0 waits for a rank that never comes: the runner must end it


@pytest.mark.uses_cuda  # NCCL where the GPUs are: under -n they are this test's while it runs
def test_distributed_test_runner_all_reduce(distributed_test_runner, tmp_path: Path) -> None:
    distributed_test_runner(functools.partial(_all_reduce_sum, out_dir=tmp_path), world_size=2)
    ranks = [(tmp_path / f"rank{r}").read_text().split() for r in range(2)]
    pids = {int(pid) for pid, _, _ in ranks}
    assert len(pids) == 2 and os.getpid() not in pids  # two processes of their own
    expected = "nccl" if torch.cuda.is_available() and torch.cuda.device_count() >= 2 else "gloo"
    assert [(backend, float(total)) for _, backend, total in ranks] == [(expected, 3.0)] * 2


def test_distributed_test_runner_fails_with_the_rank_that_failed_first(distributed_test_runner) -> None:
    with pytest.raises(Exception, match=r"^rank 1 failed first:\n(.|\n)*AssertionError: rank 1 saw a wrong sum"):
        distributed_test_runner(_rank_one_fails, world_size=2, backend="gloo")


def test_distributed_test_runner_nccl_without_gpus_skips(distributed_test_runner) -> None:
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    with pytest.raises(pytest.skip.Exception, match=f"backend nccl needs {gpus + 1} GPUs, {gpus} visible"):
        distributed_test_runner(_all_reduce_sum, world_size=gpus + 1, backend="nccl")


# ---------------------------------------------------------------- Ray, GPU monitor, session data


def _square(x: int) -> int:
    return x * x


# ray is imported by the tests that use it: the distributed ranks import this module too.
def test_init_ray_cluster_is_the_session_cluster(init_ray_cluster, ray_cluster) -> None:
    import ray

    assert init_ray_cluster is ray_cluster and ray.is_initialized()
    assert ray.get(ray.remote(num_cpus=0)(_square).remote(7)) == 49
    assert ray.cluster_resources()["CPU"] == init_ray_cluster.num_cpus


def test_ray_gpu_monitor_reads_every_gpu_of_the_cluster(ray_gpu_monitor, tracker) -> None:
    import ray

    metrics = ray_gpu_monitor.collect(force=True)
    memory = {k: v for k, v in metrics.items() if k.endswith("/memory_used_mib")}
    gpus = int(ray.cluster_resources().get("GPU", 0))
    assert len(memory) >= gpus and all(v >= 0 for v in memory.values())
    if memory and os.environ.get("PYTEST_XDIST_WORKER"):  # under -n the tracker reads this test's processes
        assert tracker.get_max_mem() <= 1.05 * max(memory.values()) + 64  # a part of some device's
    elif memory:  # the tracker's reading is the largest of these, taken a moment later
        assert tracker.get_max_mem() >= 0.5 * max(memory.values())
    else:
        assert gpus == 0 and metrics == {}
    tracker.track("gpus_seen", len(memory))


def test_session_data_holds_what_the_tracker_recorded(session_data, tracker) -> None:
    tracker.track("answer", 42)
    assert session_data["metrics"][tracker.key]["answer"] == 42
    assert tracker.key == "test_upstream_fixtures::test_session_data_holds_what_the_tracker_recorded"
    assert session_data["exit_status"] == "was not set"  # set when the session ends
    assert {"git_commit", "start_time", "gpu_types", "coverage"} <= set(session_data)


def test_unit_test_data_is_the_session_record(_unit_test_data, session_data, tracker) -> None:
    tracker.track("answer", 42)
    assert _unit_test_data is session_data  # upstream files replace one by the other
    assert _unit_test_data["metrics"][tracker.key]["answer"] == 42


def test_test_assets_dir_is_upstreams_name_for_the_assets(test_assets: Path) -> None:
    from tests.unit.conftest import TEST_ASSETS_DIR

    assert isinstance(TEST_ASSETS_DIR, str) and TEST_ASSETS_DIR == str(test_assets)


def test_ray_usage_stats_are_off_in_a_test_session_also_alone() -> None:
    """Upstream's test_meta.py asserts RAY_USAGE_STATS_ENABLED == "0" in its session (importing
    upstream's library sets it). Here the conftest sets it when pytest loads it, before any test:
    so also in a run of this test alone, and in a fresh process that only loads the conftest."""
    import subprocess
    import sys

    assert os.environ["RAY_USAGE_STATS_ENABLED"] == "0"
    probe = "import os, tests.unit.conftest; print(os.environ['RAY_USAGE_STATS_ENABLED'])"
    env = {k: v for k, v in os.environ.items() if k != "RAY_USAGE_STATS_ENABLED"}
    root = Path(__file__).resolve().parents[2]
    proc = subprocess.run([sys.executable, "-c", probe], cwd=root, env=env, capture_output=True, text=True, timeout=60)
    assert (proc.returncode, proc.stdout) == (0, "0\n"), proc.stderr
