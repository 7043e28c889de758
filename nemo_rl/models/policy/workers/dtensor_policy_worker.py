"""The policy worker: one process of a data-parallel group, started as a Ray actor.

It loads a Hugging Face causal LM from a local path, shards it with FSDP2 (`fully_shard`)
when the group has more than one worker, and trains, scores and samples on request.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, cast

import torch
import torch.distributed as dist
from torch import Tensor

from nemo_rl.distributed.worker_group import init_distributed
from nemo_rl.models.generation import hf_sampler
from nemo_rl.models.generation.interfaces import GenerationConfig, GenerationOutput
from nemo_rl.models.policy.interfaces import PolicyConfig, tokenizer_source
from nemo_rl.models.policy.workers.base import PolicyWorkerBase, resolve_dtype, token_logprobs


class DTensorPolicyWorker(PolicyWorkerBase):
    def __init__(self, config: PolicyConfig, init_reference_model: bool = False) -> None:
        init_distributed()
        self.reinit(config, init_reference_model)

    def reinit(self, config: PolicyConfig, init_reference_model: bool = False) -> None:
        """Everything the constructor does once the process group is up: the state of a new
        worker for `config` (seed, model loaded from `config["model_name"]`, a new optimizer and
        scheduler, step 0). A kept worker is given a new run this way (start_policy inside
        nemo_rl.distributed.reuse.reuse_workers), without a new process to start and torch /
        transformers to import again."""
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.model = self.reference_model = self.optimizer = None  # type: ignore[assignment]
        self.cfg = config
        self.rank = dist.get_rank()
        self.world_size = dist.get_world_size()
        on_gpu = dist.get_backend() == "nccl"
        self.device = torch.device("cuda", 0) if on_gpu else torch.device("cpu")
        self.dtype = resolve_dtype(config["precision"], on_gpu)
        self.tokenizer = AutoTokenizer.from_pretrained(tokenizer_source(config))
        torch.manual_seed(0)

        def load() -> Any:
            model: Any = AutoModelForCausalLM.from_pretrained(config["model_name"], dtype=self.dtype)
            model.to(self.device)
            if self.world_size > 1:
                mesh = init_device_mesh(self.device.type, (self.world_size,))
                for layer in model.model.layers:
                    fully_shard(layer, mesh=mesh)
                fully_shard(model, mesh=mesh)
            return model

        self.model = load()
        self.reference_model = load().eval().requires_grad_(False) if init_reference_model else None
        opt = config["optimizer"]
        self.optimizer = torch.optim.AdamW(
            self.model.parameters(),
            lr=opt["lr"],
            weight_decay=opt["weight_decay"],
            betas=(opt["betas"][0], opt["betas"][1]),
        )
        warmup = max(int(config["scheduler"]["warmup_steps"]), 0)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, lambda step: min(1.0, (step + 1) / warmup) if warmup else 1.0
        )
        self.step = 0

    # ---- hooks of PolicyWorkerBase -------------------------------------------------------
    def _global_sum(self, value: Tensor) -> Tensor:
        value = value.detach().to(self.device, torch.float32).clone()
        if self.world_size > 1:
            dist.all_reduce(value)
        return value

    def _loss_scale(self) -> float:
        return float(self.world_size)  # FSDP averages gradients over ranks: make it a sum

    def _reduce_and_clip_grads(self, max_norm: float) -> float:
        norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), max_norm)
        return float(norm.full_tensor() if hasattr(norm, "full_tensor") else norm)

    def _forward_logprobs(self, model: Any, mb: Mapping[str, Tensor]) -> Tensor:
        attn = mb["attention_mask"]
        # Positions from the mask, so left-padded rows (generation outputs) score as they were sampled.
        positions = (attn.cumsum(-1) - 1).clamp(min=0)
        with torch.autocast(self.device.type, dtype=self.dtype, enabled=self.dtype != torch.float32):
            logits = model(input_ids=mb["input_ids"], attention_mask=attn, position_ids=positions).logits
        return token_logprobs(logits, mb["input_ids"])

    # ---- API (info / train / evaluate / get_logprobs come from PolicyWorkerBase) -----------
    @torch.no_grad()
    def generate(self, batch: Mapping[str, Tensor], cfg: GenerationConfig) -> GenerationOutput:
        """Sample responses for left-padded prompts (`input_ids`, `attention_mask`)."""
        self.model.eval()
        data = self._local_batch(batch)

        def all_done(done: bool) -> bool:
            flag = torch.tensor([0.0 if done else 1.0], device=self.device)
            if self.world_size > 1:
                dist.all_reduce(flag)
            return bool(flag.item() == 0)

        out = hf_sampler.generate(
            self.model,
            data["input_ids"],
            data["attention_mask"],
            cfg,
            stop_token_ids=[int(self.tokenizer.eos_token_id)],
            pad_token_id=int(self.tokenizer.pad_token_id),
            all_done=all_done,
            seed_offset=self.rank,
        )
        return GenerationOutput(
            output_ids=out["output_ids"].cpu(),
            logprobs=out["logprobs"].cpu(),
            response_mask=out["response_mask"].cpu(),
            prompt_length=out["prompt_length"],
            stop_reasons=out["stop_reasons"],
        )

    # ---- checkpoints ---------------------------------------------------------------------
    def save_checkpoint(self, path: str, save_hf: bool = True) -> None:
        """Full (unsharded) model + optimizer + step; rank 0 writes. Also an HF folder to start from."""
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict

        opts = StateDictOptions(full_state_dict=True, cpu_offload=True)
        model_sd, optim_sd = get_state_dict(self.model, self.optimizer, options=opts)
        if self.rank == 0:
            out = Path(path)
            out.mkdir(parents=True, exist_ok=True)
            torch.save(
                {"model": model_sd, "optimizer": optim_sd, "scheduler": self.scheduler.state_dict(), "step": self.step},
                out / "policy.pt.tmp",
            )
            os.replace(out / "policy.pt.tmp", out / "policy.pt")
            if save_hf:
                from safetensors.torch import save_file

                hf = out / "hf"
                hf.mkdir(exist_ok=True)
                self.model.config.save_pretrained(hf)
                self.tokenizer.save_pretrained(hf)
                save_file({k: cast(Tensor, v).contiguous() for k, v in model_sd.items()}, hf / "model.safetensors")
        if self.world_size > 1:
            dist.barrier()

    def load_checkpoint(self, path: str) -> int:
        """Restore what save_checkpoint wrote; returns the step."""
        from torch.distributed.checkpoint.state_dict import StateDictOptions, set_state_dict

        state = torch.load(Path(path) / "policy.pt", map_location="cpu", weights_only=False)
        opts = StateDictOptions(full_state_dict=True, cpu_offload=False)
        set_state_dict(
            self.model,
            self.optimizer,
            model_state_dict=state["model"],
            optim_state_dict=state["optimizer"],
            options=opts,
        )
        self.scheduler.load_state_dict(state["scheduler"])
        self.step = int(state["step"])
        return self.step
