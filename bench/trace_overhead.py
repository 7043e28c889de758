"""Cost of remote-select's worker tracing inside a Ray policy worker (prints a table).

Under `pytest --testmon`, every Ray worker notes which functions start running in it
(tools/py/testharness/remote_select/worker_trace.py): `sys.setprofile` on Python 3.11,
`sys.monitoring` on 3.12+. This times the same work in one DTensor policy worker on the
tiny offline model (worker start, training steps, logprob passes), with and without that
tracing, each variant in a fresh process with a Ray cluster of its own, alternating A/B so
both see the same machine load:

    uv run --group test python bench/trace_overhead.py [--steps 10] [--repeat 3] [--no-docs]

The table also goes to the "trace-overhead" section of docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _bench_common import ROOT, machine, md_table, today, update_section  # noqa: E402

SECTION = "trace-overhead"


def measure(variant: str, steps: int) -> dict[str, float]:
    """One variant in this process: seconds per training step and per logprob pass."""
    sys.path[:0] = [str(ROOT), str(ROOT / "tools" / "py")]
    if variant == "traced":
        from testharness.remote_select.reach import ReachRecorder

        recorder = ReachRecorder(str(ROOT))
        recorder.install()  # injects the tracing hook into ray.init, as the pytest plugin does
        recorder.push_test("bench")
    from transformers import AutoTokenizer

    from nemo_rl.algorithms.loss_functions import NLLLoss
    from nemo_rl.data.datasets import load_chat_dataset
    from nemo_rl.data.tokenize import sft_batch
    from nemo_rl.distributed.ray_cluster import init_ray
    from nemo_rl.distributed.virtual_cluster import cluster_from_config
    from nemo_rl.models.policy.policy import Policy
    from tests.unit.policy_helpers import policy_config

    assets = ROOT / "tests" / "unit" / "test_assets"
    model = str(assets / "tiny_llama")
    batch = sft_batch(
        AutoTokenizer.from_pretrained(model), load_chat_dataset(assets / "data" / "sft_train.jsonl")[:8], max_length=64
    )
    init_ray()
    start = time.perf_counter()
    policy = Policy(policy_config(model, precision="float32"), cluster_from_config(1, "auto"))  # type: ignore[arg-type]
    try:
        policy.info()  # the worker has started: imports, model load
        started = time.perf_counter() - start
        policy.train(batch, NLLLoss())  # warm-up: first allocations
        policy.get_logprobs(batch)
        t0 = time.perf_counter()
        for _ in range(steps):
            policy.train(batch, NLLLoss())
        t1 = time.perf_counter()
        for _ in range(steps):
            policy.get_logprobs(batch)
        t2 = time.perf_counter()
    finally:
        policy.shutdown()
    return {"start_s": started, "train_s": (t1 - t0) / steps, "logprobs_s": (t2 - t1) / steps}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--repeat", type=int, default=3, help="runs of each variant (alternating)")
    ap.add_argument("--no-docs", action="store_true", help="print only; do not touch docs/benchmarks.md")
    ap.add_argument("--variant", choices=("plain", "traced"), help=argparse.SUPPRESS)  # one child run
    args = ap.parse_args(argv)
    if args.variant:
        print("RESULT " + json.dumps(measure(args.variant, args.steps)), flush=True)
        return 0
    env = dict(os.environ, RAY_ENABLE_UV_RUN_RUNTIME_ENV="0")
    env.pop("RAY_ADDRESS", None)  # a cluster of its own per run
    runs: dict[str, list[dict[str, float]]] = {"plain": [], "traced": []}
    for i in range(args.repeat):
        for variant in ("plain", "traced"):
            proc = subprocess.run(
                [sys.executable, __file__, "--variant", variant, "--steps", str(args.steps)],
                cwd=ROOT,
                env=env,
                capture_output=True,
                text=True,
                timeout=900,
                check=False,
            )
            lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
            if proc.returncode or not lines:
                print(proc.stdout[-2000:] + proc.stderr[-2000:], file=sys.stderr)
                return 1
            runs[variant].append(json.loads(lines[-1][len("RESULT ") :]))
            print(f"run {i + 1}/{args.repeat} {variant}: {runs[variant][-1]}", file=sys.stderr)
    rows = []
    for key, label in (
        ("start_s", "worker start (imports, model load)"),
        ("train_s", "training step (8 sequences)"),
        ("logprobs_s", "logprob pass (8 sequences)"),
    ):
        plain = statistics.median(r[key] for r in runs["plain"])
        traced = statistics.median(r[key] for r in runs["traced"])
        rows.append([label, f"{plain * 1000:.0f} ms", f"{traced * 1000:.0f} ms", f"{traced / plain - 1:+.0%}"])
    table = md_table(["work in one policy worker", "plain", "traced", "overhead"], rows)
    body = [
        "## Worker tracing overhead (bench/trace_overhead.py)",
        "",
        (
            f"Measured {today()} on {machine()}, with "
            f"`uv run --group test python bench/trace_overhead.py --steps {args.steps} --repeat {args.repeat}`: "
            "one DTensor policy worker on the tiny offline model, each variant in a fresh process with a "
            f"Ray cluster of its own, alternating plain / traced; medians of {args.repeat} runs."
        ),
        "",
        table,
    ]
    print(table)
    if not args.no_docs:
        update_section(SECTION, "\n".join(body) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
