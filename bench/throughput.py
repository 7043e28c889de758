"""SFT step throughput: the DTensor policy worker (through Ray) vs a plain PyTorch loop.

Both sides do the same work on the same model, batch, sequence length and dtype: load the
model with `from_pretrained(dtype=...)`, AdamW, autocast in that dtype, float32 log-softmax
of the logits, the summed NLL over `token_mask` divided by the token count, grad-norm
clipping, one optimizer step. The plain loop runs in a child process (so the driver never
holds the GPU); the worker runs as a Ray actor behind `Policy`. Warm-up steps are excluded,
the GPU is synchronised around the timed steps, both sides time the same number of steps.

    python3 bench/throughput.py                  # one H200: worker vs plain loop (~0.6B model)
    python3 bench/throughput.py --gpus 2         # + FSDP2 on 2 GPUs: scaling efficiency
    uv run python bench/throughput.py --tiny     # CPU smoke test (tiny model, float32)

MFU = 6 * N * tokens/s / peak, N = parameters without the input embedding (the LM head's
matmul is counted); attention's T^2 term is not counted. Peak: --peak-tflops (default 989,
bf16 dense of an H100/H200 SXM).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _bench_common import ROOT, machine, md_table, print_table, today, update_section  # noqa: E402

SECTION = "throughput"
TARGET_RATIO = 0.85
DTYPES = ("bfloat16", "float32", "float16")


@dataclass(frozen=True)
class ModelShape:
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    intermediate: int
    vocab: int

    def describe(self) -> str:
        return (
            f"hidden {self.hidden}, {self.layers} layers, {self.heads} heads ({self.kv_heads} KV), "
            f"MLP {self.intermediate}, vocab {self.vocab}, untied embeddings"
        )


# ~0.6B parameters: 20 x 25.2M per layer + 2 x 49M embedding/LM head.
FULL = ModelShape(hidden=1536, layers=20, heads=12, kv_heads=4, intermediate=4096, vocab=32000)
TINY = ModelShape(hidden=64, layers=2, heads=4, kv_heads=2, intermediate=128, vocab=512)


@dataclass
class Result:
    runner: str
    workers: int
    device: str
    global_batch: int
    seq: int
    steps: int
    step_s: float
    tokens_per_s: float
    first_loss: float
    last_loss: float


# --- assets ---------------------------------------------------------------------------------
def build_tokenizer(out: Path, n_tokens: int) -> None:
    """A word-level tokenizer with `n_tokens` ids (t0..tN, <pad>, <eos>, <unk>): the token ids
    are random anyway, the worker only needs a loadable tokenizer with pad and eos."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {f"t{i}": i for i in range(n_tokens - 3)}
    vocab.update({"<pad>": n_tokens - 3, "<eos>": n_tokens - 2, "<unk>": n_tokens - 1})
    tk = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tk.pre_tokenizer = pre_tokenizers.Whitespace()
    PreTrainedTokenizerFast(
        tokenizer_object=tk, pad_token="<pad>", eos_token="<eos>", unk_token="<unk>"
    ).save_pretrained(out)


def build_model(out: Path, shape: ModelShape, arch: str) -> int:
    """Random-weight model saved with save_pretrained (bfloat16 on disk); returns its size."""
    import torch
    from transformers import AutoModelForCausalLM, LlamaConfig, Qwen2Config

    cls = Qwen2Config if arch == "qwen2" else LlamaConfig
    cfg = cls(
        vocab_size=shape.vocab,
        hidden_size=shape.hidden,
        num_hidden_layers=shape.layers,
        num_attention_heads=shape.heads,
        num_key_value_heads=shape.kv_heads,
        intermediate_size=shape.intermediate,
        max_position_embeddings=8192,
        tie_word_embeddings=False,
        bos_token_id=shape.vocab - 2,
        eos_token_id=shape.vocab - 2,
        pad_token_id=shape.vocab - 3,
    )
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16)
    model.save_pretrained(out)
    build_tokenizer(out, shape.vocab)
    return sum(p.numel() for p in model.parameters())


def make_batch(rows: int, seq: int, vocab: int) -> dict[str, Any]:
    """The same batch on both sides (fixed seed): random tokens, no padding, all tokens counted
    except position 0 (its log-prob is 0 by definition)."""
    import torch

    g = torch.Generator().manual_seed(1234)
    ids = torch.randint(0, vocab - 3, (rows, seq), generator=g)
    mask = torch.ones(rows, seq, dtype=torch.long)
    token_mask = torch.ones(rows, seq, dtype=torch.long)
    token_mask[:, 0] = 0
    return {"input_ids": ids, "attention_mask": mask, "token_mask": token_mask}


# --- the plain loop (child process) ----------------------------------------------------------
def plain_loop(args: argparse.Namespace) -> dict[str, Any]:
    """What DTensorPolicyWorker.train does for one worker, written out with no framework."""
    import torch
    from transformers import AutoModelForCausalLM

    on_gpu = torch.cuda.is_available()
    device = torch.device("cuda", 0) if on_gpu else torch.device("cpu")
    dtype = getattr(torch, args.precision)
    torch.manual_seed(0)
    model: Any = AutoModelForCausalLM.from_pretrained(args.model_dir, dtype=dtype)
    model.to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01, betas=(0.9, 0.999))
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda _step: 1.0)
    batch = {k: v.to(device) for k, v in make_batch(args.batch, args.seq, args.vocab).items()}

    def step() -> float:
        model.train()
        opt.zero_grad(set_to_none=True)
        tokens = batch["token_mask"].sum().float().clamp(min=1.0)
        loss_sum = torch.zeros((), device=device)
        for start in range(0, args.batch, args.micro_batch):
            mb = {k: v[start : start + args.micro_batch] for k, v in batch.items()}
            positions = (mb["attention_mask"].cumsum(-1) - 1).clamp(min=0)
            with torch.autocast(device.type, dtype=dtype, enabled=dtype != torch.float32):
                logits = model(
                    input_ids=mb["input_ids"], attention_mask=mb["attention_mask"], position_ids=positions
                ).logits
            logp = torch.log_softmax(logits[:, :-1].float(), dim=-1)
            picked = torch.nn.functional.pad(logp.gather(-1, mb["input_ids"][:, 1:, None]).squeeze(-1), (1, 0))
            loss = -(picked * mb["token_mask"].to(picked.dtype)).sum()
            (loss / tokens).backward()
            loss_sum += loss.detach()
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        if math.isfinite(float(grad_norm)):
            opt.step()
        sched.step()
        return float(loss_sum / tokens)

    def sync() -> None:
        if on_gpu:
            torch.cuda.synchronize()

    losses = [step() for _ in range(args.warmup)]
    sync()
    t0 = time.perf_counter()
    losses += [step() for _ in range(args.steps)]
    sync()
    elapsed = time.perf_counter() - t0
    return {"elapsed": elapsed, "losses": losses, "device": str(device)}


def run_plain(args: argparse.Namespace, model_dir: Path) -> Result:
    cmd = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--role",
        "plain",
        "--model-dir",
        str(model_dir),
        "--batch",
        str(args.batch),
        "--seq",
        str(args.seq),
        "--micro-batch",
        str(args.micro_batch),
        "--steps",
        str(args.steps),
        "--warmup",
        str(args.warmup),
        "--precision",
        args.precision,
        "--vocab",
        str(args.vocab),
        "--lr",
        str(args.lr),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout, check=False)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"the plain loop failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
    out = json.loads(lines[-1])
    return _result("plain PyTorch loop", 1, out["device"], args.batch, args, out["elapsed"], out["losses"])


def _result(
    runner: str, workers: int, device: str, rows: int, args: argparse.Namespace, elapsed: float, losses: list[float]
) -> Result:
    step_s = elapsed / args.steps
    return Result(
        runner=runner,
        workers=workers,
        device=device,
        global_batch=rows,
        seq=args.seq,
        steps=args.steps,
        step_s=step_s,
        tokens_per_s=rows * args.seq / step_s,
        first_loss=losses[0],
        last_loss=losses[-1],
    )


# --- the worker through Ray ------------------------------------------------------------------
def run_worker(args: argparse.Namespace, model_dir: Path, workers: int) -> Result:
    from nemo_rl.algorithms.loss_functions import NLLLoss
    from nemo_rl.distributed.virtual_cluster import cluster_from_config
    from nemo_rl.models.policy.policy import Policy

    rows = args.batch * workers  # weak scaling: the same rows per worker
    cfg: Any = {
        "model_name": str(model_dir),
        "precision": args.precision,
        "train_global_batch_size": rows,
        "train_micro_batch_size": args.micro_batch,
        "logprob_micro_batch_size": args.micro_batch,
        "max_total_sequence_length": args.seq,
        "max_grad_norm": 1.0,
        "optimizer": {"lr": args.lr, "weight_decay": 0.01, "betas": [0.9, 0.999]},
        "scheduler": {"warmup_steps": 0},
        "megatron_cfg": {"enabled": False},
    }
    batch = make_batch(rows, args.seq, args.vocab)
    policy = Policy(cfg, cluster_from_config(workers, "auto"))
    try:
        device = policy.info()[0]["device"]
        loss_fn = NLLLoss()
        losses = [policy.train(batch, loss_fn)["loss"] for _ in range(args.warmup)]
        # Each train() returns floats read from the GPU: the call has finished when it returns.
        t0 = time.perf_counter()
        losses += [policy.train(batch, loss_fn)["loss"] for _ in range(args.steps)]
        elapsed = time.perf_counter() - t0
    finally:
        policy.shutdown()
    return _result(
        f"DTensor worker via Ray ({'FSDP2' if workers > 1 else '1 worker'})",
        workers,
        device,
        rows,
        args,
        elapsed,
        losses,
    )


def start_ray() -> bool:
    """Start (or join) Ray with this machine's GPUs; True if we started it."""
    # Workers run this interpreter, not a uv-built copy: Ray reads the switch when imported.
    os.environ.setdefault("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")
    import torch

    from nemo_rl.distributed.ray_cluster import init_ray

    os.environ.setdefault("RAY_TMPDIR", "/tmp/ray_throughput")
    # Workers import nemo_rl from this checkout (PYTHONPATH reaches them through the worker group).
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH", "")]))
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    info = init_ray(num_gpus=gpus)
    return info.started_here


# --- report ----------------------------------------------------------------------------------
def mfu(tps: float, flops_params: int, peak: float, workers: int) -> str:
    if peak <= 0:
        return "n/a"
    return f"{6 * flops_params * tps / (peak * workers):.1%}"


def render(
    results: list[Result],
    shape: ModelShape,
    n_params: int,
    flops_params: int,
    args: argparse.Namespace,
    cmd_line: str,
    peak: float,
) -> tuple[str, list[list[object]], list[str]]:
    header = [
        "runner",
        "workers",
        "device",
        "global batch x seq",
        "step time",
        "tokens/s",
        "tokens/s per worker",
        "MFU",
        "loss first -> last",
    ]
    rows: list[list[object]] = []
    for r in results:
        rows.append(
            [
                r.runner,
                r.workers,
                r.device,
                f"{r.global_batch} x {r.seq}",
                f"{r.step_s * 1000:.1f} ms",
                f"{r.tokens_per_s:,.0f}",
                f"{r.tokens_per_s / r.workers:,.0f}",
                mfu(r.tokens_per_s, flops_params, peak, r.workers),
                f"{r.first_loss:.3f} -> {r.last_loss:.3f}",
            ]
        )
    notes: list[str] = []
    plain = next((r for r in results if r.runner.startswith("plain")), None)
    one = next((r for r in results if r.runner.startswith("DTensor") and r.workers == 1), None)
    if plain and one:
        ratio = one.tokens_per_s / plain.tokens_per_s
        verdict = "met" if ratio >= TARGET_RATIO else f"MISSED by {TARGET_RATIO - ratio:.1%} points"
        notes.append(f"worker / plain loop tokens/s: **{ratio:.1%}** (target >= {TARGET_RATIO:.0%}: {verdict})")
    for r in results:
        if one and r.runner.startswith("DTensor") and r.workers > 1:
            eff = r.tokens_per_s / (r.workers * one.tokens_per_s)
            notes.append(
                f"FSDP2 scaling efficiency at {r.workers} workers (weak scaling, {args.batch} rows per "
                f"worker): **{eff:.1%}** (tokens/s at {r.workers} / {r.workers} x tokens/s at 1)"
            )
    body = [
        "## Training throughput (bench/throughput.py)",
        "",
        f"Measured {today()} on {machine()}, with `{cmd_line}`.",
        "",
        f"Model: {args.arch} config with random weights, {n_params / 1e6:,.1f}M parameters "
        f"({shape.describe()}); {args.precision}; micro-batch {args.micro_batch}; "
        f"{args.warmup} warm-up + {args.steps} timed steps; AdamW, grad clipping 1.0. "
        f"MFU = 6 x {flops_params / 1e6:,.1f}M (parameters without the input embedding) x tokens/s / "
        + (f"{peak / 1e12:g} TFLOP/s per GPU." if peak > 0 else "(no peak given: n/a)."),
        "",
        md_table(header, rows),
        "",
        *[f"- {n}" for n in notes],
    ]
    if args.tiny:
        body += [
            "",
            "This is the CPU smoke run (`--tiny`): it checks the script, not the target; "
            "the H200 numbers come from a run without `--tiny`.",
        ]
    return "\n".join(body) + "\n", rows, notes


def parse(argv: list[str]) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--tiny", action="store_true", help="tiny model, small batch, float32 (CPU smoke test)")
    ap.add_argument("--gpus", type=int, default=1, help="also run FSDP2 on this many workers (default 1)")
    ap.add_argument("--arch", choices=("qwen2", "llama"), default="qwen2")
    ap.add_argument("--batch", type=int, help="rows per worker per step (default 8; tiny 4)")
    ap.add_argument("--seq", type=int, help="sequence length (default 2048; tiny 64)")
    ap.add_argument("--micro-batch", type=int, help="micro-batch rows (default = --batch)")
    ap.add_argument("--steps", type=int, help="timed steps (default 20; tiny 3)")
    ap.add_argument("--warmup", type=int, help="untimed warm-up steps (default 3; tiny 1)")
    ap.add_argument("--precision", choices=DTYPES, help="default bfloat16; tiny float32")
    ap.add_argument("--peak-tflops", type=float, help="peak per device for MFU (default 989; tiny: none)")
    ap.add_argument("--lr", type=float, default=1e-5)
    ap.add_argument("--timeout", type=int, default=1800, help="seconds for the plain-loop child")
    ap.add_argument("--no-docs", action="store_true", help="print only; do not touch docs/benchmarks.md")
    ap.add_argument("--role", choices=("driver", "plain"), default="driver", help=argparse.SUPPRESS)
    ap.add_argument("--model-dir", help=argparse.SUPPRESS)
    ap.add_argument("--vocab", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    tiny = args.tiny
    for name, full, small in (
        ("batch", 8, 4),
        ("seq", 2048, 64),
        ("steps", 20, 3),
        ("warmup", 3, 1),
        ("precision", "bfloat16", "float32"),
    ):
        if getattr(args, name) is None:
            setattr(args, name, small if tiny else full)
    if args.micro_batch is None:
        args.micro_batch = args.batch
    if args.peak_tflops is None:
        args.peak_tflops = 0.0 if tiny else 989.0
    for name in ("batch", "seq", "steps", "micro_batch", "gpus"):
        if getattr(args, name) < 1:
            ap.error(f"--{name.replace('_', '-')} must be at least 1")
    if args.warmup < 0:
        ap.error("--warmup must be >= 0")
    if args.batch % args.micro_batch:
        ap.error(f"--batch {args.batch} is not a multiple of --micro-batch {args.micro_batch}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(sys.argv[1:] if argv is None else argv)
    if args.role == "plain":
        print(json.dumps(plain_loop(args)))
        return 0
    sys.path.insert(0, str(ROOT))
    import torch

    if not args.tiny and not torch.cuda.is_available():
        print("throughput: no CUDA GPU found; use --tiny for the CPU smoke test", file=sys.stderr)
        return 2
    if torch.cuda.is_available() and args.gpus > torch.cuda.device_count():
        print(f"throughput: --gpus {args.gpus} but {torch.cuda.device_count()} GPU(s) visible", file=sys.stderr)
        return 2
    shape = TINY if args.tiny else FULL
    args.vocab = shape.vocab
    tmp = Path(tempfile.mkdtemp(prefix="throughput_"))
    started = False
    try:
        t0 = time.perf_counter()
        n_params = build_model(tmp / "model", shape, args.arch)
        flops_params = n_params - shape.vocab * shape.hidden  # input embedding: a lookup, no FLOPs
        print(
            f"throughput: {args.arch} model with {n_params / 1e6:.1f}M parameters built in "
            f"{time.perf_counter() - t0:.1f} s",
            flush=True,
        )
        results = [run_plain(args, tmp / "model")]
        print(f"throughput: plain loop {results[-1].tokens_per_s:,.0f} tokens/s", flush=True)
        started = start_ray()
        for n in sorted({1, args.gpus}):
            results.append(run_worker(args, tmp / "model", n))
            print(f"throughput: worker x{n} {results[-1].tokens_per_s:,.0f} tokens/s", flush=True)
    finally:
        if started:
            import ray

            ray.shutdown()
        shutil.rmtree(tmp, ignore_errors=True)
    cmd = "uv run python bench/throughput.py --tiny" if args.tiny else "python3 bench/throughput.py"
    cmd += f" --gpus {args.gpus}" if args.gpus > 1 else ""
    body, rows, notes = render(results, shape, n_params, flops_params, args, cmd, args.peak_tflops * 1e12)
    print_table(
        "SFT step throughput",
        ["runner", "workers", "device", "batch x seq", "step", "tokens/s", "per worker", "MFU", "loss"],
        rows,
    )
    for n in notes:
        print(n.replace("**", ""))
    print(json.dumps([asdict(r) for r in results]))
    if not args.no_docs:
        update_section(SECTION, body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
