"""The Megatron-core policy worker: the DTensor worker's interface over a megatron-core GPT model.

Selected with `policy.megatron_cfg.enabled=true`; started by `Policy` as a Ray actor, one per
rank. Ranks form `tensor_model_parallel_size`-wide tensor-parallel groups; the remaining factor is
data parallelism. `Policy` hands every rank its own shard of the batch, so the ranks of one TP
group first gather their shards (they must all see the same rows) and each returns its own part.

megatron-core needs CUDA here: its GPT forward calls `torch.cuda.current_device()` and its RNG
tracker seeds CUDA generators. On a CPU-only machine the constructor stops with a one-line error;
the unit tests run this class on CPU through a documented test-support subclass
(tests/unit/models/megatron/cpu_shim.py), never through this module.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor

from nemo_rl.distributed.worker_group import init_distributed
from nemo_rl.models.generation.interfaces import GenerationConfig, GenerationOutput
from nemo_rl.models.megatron import convert
from nemo_rl.models.megatron.model import (
    build_gpt_model,
    forward_logits,
    load_weights,
    model_weights,
)
from nemo_rl.models.policy.interfaces import PolicyConfig, tokenizer_source
from nemo_rl.models.policy.workers.base import PolicyWorkerBase, resolve_dtype, token_logprobs

SEED = 1234


def load_hf_weights(model_name: str) -> tuple[Any, dict[str, Tensor]]:
    """(HF config, float32 state dict on CPU) of a local folder or hub name."""
    from transformers import AutoConfig, AutoModelForCausalLM

    cfg = AutoConfig.from_pretrained(model_name)
    hf = AutoModelForCausalLM.from_pretrained(model_name, dtype=torch.float32)
    return cfg, {k: v.detach() for k, v in hf.state_dict().items()}


class MegatronPolicyWorker(PolicyWorkerBase):
    # A CPU run needs the test-support shim (see the module docstring); subclasses there set this.
    allow_cpu: bool = False

    def __init__(self, config: PolicyConfig, init_reference_model: bool = False) -> None:
        from megatron.core import parallel_state
        from transformers import AutoTokenizer

        on_gpu = torch.cuda.is_available()
        if not on_gpu and not self.allow_cpu:
            raise RuntimeError(
                "the Megatron policy worker needs a CUDA GPU (megatron-core's GPT forward calls "
                "torch.cuda.current_device()); on CPU use policy.megatron_cfg.enabled=false"
            )
        init_distributed()
        self.cfg = config
        self.rank = dist.get_rank()
        self.world_size = dist.get_world_size()
        self.tp = int(config.get("megatron_cfg", {}).get("tensor_model_parallel_size", 1))
        if self.tp < 1 or self.world_size % self.tp:
            raise ValueError(f"tensor_model_parallel_size={self.tp} must divide the {self.world_size} workers")
        self.device = torch.device("cuda", 0) if on_gpu else torch.device("cpu")
        self.dtype = resolve_dtype(config["precision"], on_gpu)
        self.tokenizer = AutoTokenizer.from_pretrained(tokenizer_source(config))

        if not parallel_state.model_parallel_is_initialized():
            parallel_state.initialize_model_parallel(tensor_model_parallel_size=self.tp)
        self.tp_group = parallel_state.get_tensor_model_parallel_group()
        self.tp_rank = parallel_state.get_tensor_model_parallel_rank()
        self.dp_group = parallel_state.get_data_parallel_group()
        self.dp_size = parallel_state.get_data_parallel_world_size()
        self._seed_rng(SEED)

        self.hf_config, hf_sd = load_hf_weights(config["model_name"])
        self.arch = convert.arch_from_hf_config(self.hf_config)
        local = convert.shard_for_rank(convert.hf_to_mcore(self.arch, hf_sd), self.tp_rank, self.tp)
        del hf_sd

        def load() -> Any:
            model = build_gpt_model(self.arch, self.tp)
            load_weights(model, local)
            return model.to(self.device)

        self.model = load()
        self.reference_model = load().eval().requires_grad_(False) if init_reference_model else None
        opt = config["optimizer"]
        beta1, beta2 = (float(b) for b in opt["betas"])
        self.optimizer = torch.optim.AdamW(
            self.model.parameters(), lr=opt["lr"], weight_decay=opt["weight_decay"], betas=(beta1, beta2)
        )
        warmup = max(int(config["scheduler"]["warmup_steps"]), 0)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, lambda step: min(1.0, (step + 1) / warmup) if warmup else 1.0
        )
        self.step = 0

    def _seed_rng(self, seed: int) -> None:
        """Seed torch and megatron's model-parallel CUDA RNG tracker (the CPU shim overrides this)."""
        from megatron.core import tensor_parallel

        torch.manual_seed(seed)
        tensor_parallel.model_parallel_cuda_manual_seed(seed)

    # ---- helpers -------------------------------------------------------------------------
    def _local_batch(self, batch: Mapping[str, Tensor]) -> dict[str, Tensor]:
        """This rank's shard -> the rows of its whole TP group (TP rank order), on the device."""
        data = {k: v.to(self.device) for k, v in batch.items()}
        if self.tp == 1:
            return data
        out = {}
        for k, v in data.items():
            parts = [torch.empty_like(v) for _ in range(self.tp)]
            dist.all_gather(parts, v.contiguous(), group=self.tp_group)
            out[k] = torch.cat(parts)
        return out

    def _own_rows(self, t: Tensor) -> Tensor:
        rows = t.shape[0] // self.tp
        return t[self.tp_rank * rows : (self.tp_rank + 1) * rows]

    def _global_sum(self, value: Tensor) -> Tensor:
        value = value.detach().to(self.device, torch.float32).clone()
        if self.dp_size > 1:
            dist.all_reduce(value, group=self.dp_group)
        return value

    def _forward_logprobs(self, model: Any, mb: Mapping[str, Tensor]) -> Tensor:
        with torch.autocast(self.device.type, dtype=self.dtype, enabled=self.dtype != torch.float32):
            logits = forward_logits(model, mb["input_ids"], mb["attention_mask"])
        return token_logprobs(logits, mb["input_ids"])

    def _reduce_and_clip_grads(self, max_norm: float) -> float:
        """Sum gradients over data parallelism (the loss is already / global tokens), then the
        global L2 norm (split params summed over TP, replicated ones once), and clip."""
        if self.dp_size > 1:
            for p in self.model.parameters():
                if p.grad is not None:
                    dist.all_reduce(p.grad, group=self.dp_group)
        split = torch.zeros((), device=self.device)
        replicated = torch.zeros((), device=self.device)
        grads = []
        for name, p in self.model.named_parameters():
            if p.grad is None:
                continue
            grads.append(p.grad)
            sq = p.grad.detach().float().pow(2).sum()
            if convert.is_tensor_parallel_split(name):
                split += sq
            else:
                replicated += sq
        if self.tp > 1:
            dist.all_reduce(split, group=self.tp_group)
        norm = float((split + replicated).sqrt())
        coef = max_norm / (norm + 1e-6)
        if coef < 1.0 and math.isfinite(norm):
            for g in grads:
                g.mul_(coef)
        return norm

    # ---- API -----------------------------------------------------------------------------
    def info(self) -> dict[str, Any]:
        return {**super().info(), "backend": "megatron", "tensor_model_parallel_size": self.tp}

    def generate(self, batch: Mapping[str, Tensor], cfg: GenerationConfig) -> GenerationOutput:
        raise NotImplementedError(
            "generation is not implemented for the Megatron policy worker; "
            "use policy.megatron_cfg.enabled=false (DTensor worker) for GRPO rollouts"
        )

    # ---- checkpoints ---------------------------------------------------------------------
    def _full(self, local: Mapping[str, Tensor]) -> dict[str, Tensor]:
        """Gather a rank-local, parameter-shaped dict across the TP group -> full (TP = 1) dict on CPU."""
        if self.tp == 1:
            return {k: v.detach().cpu().clone() for k, v in local.items()}
        shards: list[dict[str, Tensor]] = [{} for _ in range(self.tp)]
        for k, v in local.items():
            parts = [torch.empty_like(v) for _ in range(self.tp)]
            dist.all_gather(parts, v.detach().contiguous(), group=self.tp_group)
            for i, p in enumerate(parts):
                shards[i][k] = p.cpu()
        return convert.unshard(shards)

    def _optimizer_moments(self) -> dict[str, dict[str, Tensor]]:
        """AdamW's exp_avg / exp_avg_sq by parameter name (zeros before the first step)."""
        moments: dict[str, dict[str, Tensor]] = {"exp_avg": {}, "exp_avg_sq": {}}
        for name, p in self.model.named_parameters():
            state = self.optimizer.state.get(p, {})
            for key, by_name in moments.items():
                by_name[name] = state[key] if key in state else torch.zeros_like(p)
        return moments

    def save_checkpoint(self, path: str, save_hf: bool = True) -> None:
        """TP-independent checkpoint (full megatron weights + optimizer moments); rank 0 writes.

        Also, with save_hf, an HF folder (`<path>/hf`) that transformers loads directly.
        """
        weights = self._full(model_weights(self.model))
        moments = {k: self._full(v) for k, v in self._optimizer_moments().items()}
        if self.rank == 0:
            out = Path(path)
            out.mkdir(parents=True, exist_ok=True)
            groups = [
                {k: v for k, v in g.items() if k != "params"} for g in self.optimizer.state_dict()["param_groups"]
            ]
            adam_steps = [float(s["step"]) for s in self.optimizer.state.values() if "step" in s]
            torch.save(
                {
                    "format": "nemo_rl.megatron.v1",
                    "model": weights,
                    "moments": moments,
                    "adam_step": adam_steps[0] if adam_steps else 0.0,
                    "param_groups": groups,
                    "scheduler": self.scheduler.state_dict(),
                    "step": self.step,
                },
                out / "policy.pt.tmp",
            )
            os.replace(out / "policy.pt.tmp", out / "policy.pt")
            if save_hf:
                from safetensors.torch import save_file

                hf = out / "hf"
                hf.mkdir(exist_ok=True)
                self.hf_config.save_pretrained(hf)
                self.tokenizer.save_pretrained(hf)
                save_file(
                    convert.mcore_to_hf(self.arch, weights), hf / "model.safetensors.tmp", metadata={"format": "pt"}
                )
                os.replace(hf / "model.safetensors.tmp", hf / "model.safetensors")
        dist.barrier()

    def load_checkpoint(self, path: str) -> int:
        """Restore what save_checkpoint wrote (at any TP size); returns the step."""
        file = Path(path) / "policy.pt"
        if not file.is_file():
            raise FileNotFoundError(f"no Megatron policy checkpoint at {file}")
        state = torch.load(file, map_location="cpu", weights_only=False)
        if state.get("format") != "nemo_rl.megatron.v1":
            raise ValueError(f"{file} is not a Megatron policy checkpoint (was it written by the DTensor worker?)")
        load_weights(self.model, convert.shard_for_rank(state["model"], self.tp_rank, self.tp))
        moments = {k: convert.shard_for_rank(v, self.tp_rank, self.tp) for k, v in state["moments"].items()}
        names = [n for n, _ in self.model.named_parameters()]
        opt_state: dict[int, dict[str, Any]] = {}
        if state["adam_step"] > 0:
            opt_state = {
                i: {
                    "step": torch.tensor(state["adam_step"]),
                    "exp_avg": moments["exp_avg"][n],
                    "exp_avg_sq": moments["exp_avg_sq"][n],
                }
                for i, n in enumerate(names)
            }
        groups = [dict(g, params=list(range(len(names)))) for g in state["param_groups"]]
        self.optimizer.load_state_dict({"state": opt_state, "param_groups": groups})
        self.scheduler.load_state_dict(state["scheduler"])
        self.step = int(state["step"])
        return self.step
