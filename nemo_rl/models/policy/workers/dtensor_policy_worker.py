"""The policy worker: one process of a data-parallel group, started as a Ray actor.

It loads a Hugging Face causal LM from a local path, shards it with FSDP2 (`fully_shard`)
when the group has more than one worker, and trains, scores and samples on request.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any, Iterator, Mapping, cast

import torch
import torch.distributed as dist
from torch import Tensor

from nemo_rl.distributed.worker_group import init_distributed
from nemo_rl.models.generation import hf_sampler
from nemo_rl.models.generation.interfaces import GenerationConfig, GenerationOutput
from nemo_rl.models.policy.interfaces import LossFunction, PolicyConfig


def resolve_dtype(precision: str, on_gpu: bool) -> torch.dtype:
    if precision == "auto":
        return torch.bfloat16 if on_gpu else torch.float32
    table = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
    if precision not in table:
        raise ValueError(f"policy.precision must be auto, float32, bfloat16 or float16, got {precision!r}")
    return table[precision]


def token_logprobs(logits: Tensor, input_ids: Tensor) -> Tensor:
    """[B, T] log p(input_ids[:, t] | < t) in float32; 0 at t = 0."""
    logp = torch.log_softmax(logits[:, :-1].float(), dim=-1)
    picked = logp.gather(-1, input_ids[:, 1:, None]).squeeze(-1)
    return torch.nn.functional.pad(picked, (1, 0))


def micro_batches(batch: Mapping[str, Tensor], size: int) -> Iterator[dict[str, Tensor]]:
    n = next(iter(batch.values())).shape[0]
    for start in range(0, n, size):
        yield {k: v[start:start + size] for k, v in batch.items()}


class DTensorPolicyWorker:
    def __init__(self, config: PolicyConfig, init_reference_model: bool = False) -> None:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard
        from transformers import AutoModelForCausalLM, AutoTokenizer

        init_distributed()
        self.cfg = config
        self.rank = dist.get_rank()
        self.world_size = dist.get_world_size()
        on_gpu = dist.get_backend() == "nccl"
        self.device = torch.device("cuda", 0) if on_gpu else torch.device("cpu")
        self.dtype = resolve_dtype(config["precision"], on_gpu)
        self.tokenizer = AutoTokenizer.from_pretrained(config["model_name"])
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
            self.model.parameters(), lr=opt["lr"], weight_decay=opt["weight_decay"],
            betas=(opt["betas"][0], opt["betas"][1]),
        )
        warmup = max(int(config["scheduler"]["warmup_steps"]), 0)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, lambda step: min(1.0, (step + 1) / warmup) if warmup else 1.0
        )
        self.step = 0

    # ---- helpers -------------------------------------------------------------------------
    def _to_device(self, batch: Mapping[str, Tensor]) -> dict[str, Tensor]:
        return {k: v.to(self.device) for k, v in batch.items()}

    def _all_sum(self, value: Tensor) -> Tensor:
        value = value.detach().to(self.device, torch.float32).clone()
        if self.world_size > 1:
            dist.all_reduce(value)
        return value

    def _forward_logprobs(self, model: Any, mb: Mapping[str, Tensor]) -> Tensor:
        attn = mb["attention_mask"]
        # Positions from the mask, so left-padded rows (generation outputs) score as they were sampled.
        positions = (attn.cumsum(-1) - 1).clamp(min=0)
        with torch.autocast(self.device.type, dtype=self.dtype, enabled=self.dtype != torch.float32):
            logits = model(input_ids=mb["input_ids"], attention_mask=attn, position_ids=positions).logits
        return token_logprobs(logits, mb["input_ids"])

    # ---- API -----------------------------------------------------------------------------
    def info(self) -> dict[str, Any]:
        return {"rank": self.rank, "world_size": self.world_size, "device": str(self.device),
                "dtype": str(self.dtype).removeprefix("torch."), "pid": os.getpid(),
                "num_params": sum(p.numel() for p in self.model.parameters())}

    def train(self, batch: Mapping[str, Tensor], loss_fn: LossFunction, micro_batch_size: int | None = None) -> dict[str, float]:
        """One optimizer step on this worker's shard of the global batch."""
        self.model.train()
        self.optimizer.zero_grad(set_to_none=True)
        data = self._to_device(batch)
        global_tokens = self._all_sum(data["token_mask"].sum()).clamp(min=1.0)
        mbs = micro_batch_size or self.cfg["train_micro_batch_size"]
        loss_sum = torch.zeros((), device=self.device)
        metric_sums: dict[str, Tensor] = {}
        for mb in micro_batches(data, mbs):
            logprobs = self._forward_logprobs(self.model, mb)
            loss, metrics = loss_fn(logprobs, mb)
            # FSDP averages gradients over ranks; scale so the result is sum / global tokens.
            (loss * self.world_size / global_tokens).backward()
            loss_sum += loss.detach()
            for k, v in metrics.items():
                metric_sums[k] = metric_sums.get(k, torch.zeros((), device=self.device)) + v.detach().float()
        grad_norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.cfg["max_grad_norm"])
        if hasattr(grad_norm, "full_tensor"):
            grad_norm = grad_norm.full_tensor()
        lr = self.scheduler.get_last_lr()[0]
        if math.isfinite(float(grad_norm)):
            self.optimizer.step()
        self.scheduler.step()
        self.step += 1
        out = {"loss": float(self._all_sum(loss_sum) / global_tokens), "grad_norm": float(grad_norm),
               "lr": float(lr), "num_tokens": float(global_tokens)}
        for k, v in metric_sums.items():
            out[k] = float(self._all_sum(v) / global_tokens)
        return out

    @torch.no_grad()
    def evaluate(self, batch: Mapping[str, Tensor], loss_fn: LossFunction) -> dict[str, float]:
        """Loss without a gradient step (validation)."""
        self.model.eval()
        data = self._to_device(batch)
        global_tokens = self._all_sum(data["token_mask"].sum()).clamp(min=1.0)
        loss_sum = torch.zeros((), device=self.device)
        for mb in micro_batches(data, self.cfg["train_micro_batch_size"]):
            loss, _ = loss_fn(self._forward_logprobs(self.model, mb), mb)
            loss_sum += loss
        return {"loss": float(self._all_sum(loss_sum) / global_tokens), "num_tokens": float(global_tokens)}

    @torch.no_grad()
    def get_logprobs(self, batch: Mapping[str, Tensor], reference: bool = False) -> Tensor:
        """[B, T] token log-probabilities on CPU (the reference model's when asked)."""
        model = self.reference_model if reference else self.model
        if model is None:
            raise RuntimeError("this worker was started without a reference model")
        model.eval()
        data = self._to_device(batch)
        out = [self._forward_logprobs(model, mb).cpu() for mb in micro_batches(data, self.cfg["logprob_micro_batch_size"])]
        return torch.cat(out)

    @torch.no_grad()
    def generate(self, batch: Mapping[str, Tensor], cfg: GenerationConfig) -> GenerationOutput:
        """Sample responses for left-padded prompts (`input_ids`, `attention_mask`)."""
        self.model.eval()
        data = self._to_device(batch)

        def all_done(done: bool) -> bool:
            flag = torch.tensor([0.0 if done else 1.0], device=self.device)
            if self.world_size > 1:
                dist.all_reduce(flag)
            return bool(flag.item() == 0)

        out = hf_sampler.generate(
            self.model, data["input_ids"], data["attention_mask"], cfg,
            stop_token_ids=[int(self.tokenizer.eos_token_id)], pad_token_id=int(self.tokenizer.pad_token_id),
            all_done=all_done, seed_offset=self.rank,
        )
        return GenerationOutput(
            output_ids=out["output_ids"].cpu(), logprobs=out["logprobs"].cpu(),
            response_mask=out["response_mask"].cpu(), prompt_length=out["prompt_length"],
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
            torch.save({"model": model_sd, "optimizer": optim_sd, "scheduler": self.scheduler.state_dict(),
                        "step": self.step}, out / "policy.pt.tmp")
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
        set_state_dict(self.model, self.optimizer, model_state_dict=state["model"],
                       optim_state_dict=state["optimizer"], options=opts)
        self.scheduler.load_state_dict(state["scheduler"])
        self.step = int(state["step"])
        return self.step
