"""The fixed costs every test pays again and again, on this machine: starting an interpreter,
importing Ray / torch / transformers / the policy worker, a nested pytest, a Ray cluster's
start, and an actor's spawn until ready (bare, importing torch, and on a GPU with a CUDA
context). A serial suite is mostly these costs; they explain why one machine runs it slower
than another (issue 17: the H200's serial run against the 2-core CPU box's).

    uv run --group test python bench/startup_costs.py [--repeat 3] [--no-docs]
    PYTHONPATH=.:tools/py python3 bench/startup_costs.py --no-docs   # a machine without uv

Prints a table (median and min of --repeat runs) and writes it to docs/benchmarks.md, section
"startup-costs" (or --section NAME), unless --no-docs.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _bench_common import ROOT, checkout_env, machine, md_table, print_table, today, update_section  # noqa: E402

sys.path.insert(0, str(ROOT / "tools" / "py" / "tests"))
from inner_plugins import foreign_plugins, installed_plugins  # noqa: E402

SECTION = "startup-costs"

PROCESSES = {
    "interpreter start (python -c pass)": "pass",
    "import ray": "import ray",
    "import torch": "import torch",
    "import transformers (+ a model class)": "import transformers; transformers.AutoModelForCausalLM",
    "import the policy worker (nemo_rl)": "import nemo_rl.models.policy.workers.dtensor_policy_worker",
}


def timed(fn: Callable[[], object]) -> float:
    began = time.perf_counter()
    fn()
    return time.perf_counter() - began


def run_python(code: str) -> None:
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=checkout_env(), check=True)


CUDA_STEPS = """
import json, time
import torch
steps = {}
t = time.perf_counter()
if torch.cuda.is_available():
    torch.ones(1, device="cuda").sum().item()
    steps["CUDA context (first tensor on the GPU)"] = time.perf_counter() - t
    x = torch.ones(64, 64, device="cuda")
    t = time.perf_counter()
    (x @ x).sum().item()
    steps["first matmul on the GPU (cuBLAS loaded)"] = time.perf_counter() - t
    t = time.perf_counter()
    torch.distributed.init_process_group("nccl", init_method="tcp://127.0.0.1:29531", rank=0, world_size=1)
    torch.distributed.all_reduce(x)
    torch.cuda.synchronize()
    steps["NCCL: a 1-rank group and its first all_reduce"] = time.perf_counter() - t
    torch.distributed.destroy_process_group()
print(json.dumps(steps))
"""


def cuda_steps() -> dict[str, float]:
    """Inside one fresh process: the GPU's own start-up costs."""
    proc = subprocess.run([sys.executable, "-c", CUDA_STEPS], check=True, capture_output=True, text=True)
    steps: dict[str, float] = json.loads(proc.stdout.strip().splitlines()[-1])
    return steps


def nested_pytest(project: Path, blocked: Sequence[str] = ()) -> None:
    """One trivial test, every installed plugin loaded (the harness's included) but the
    `blocked` ones, which the harness's own tests block in their inner runs."""
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            *(f"-p no:{p}" for p in blocked),
            str(project),
        ],
        cwd=project,
        check=True,
        stdout=subprocess.DEVNULL,
    )


def ray_costs(repeat: int) -> dict[str, list[float]]:
    """A cluster's start and stop, and actor spawns until their first call returns."""
    import ray

    os.environ.setdefault("RAY_worker_niceness", "0")
    os.environ.setdefault("RAY_prestart_worker_first_driver", "0")
    out: dict[str, list[float]] = {}

    @ray.remote(num_cpus=0)
    class Bare:
        def ready(self) -> bool:
            return True

    @ray.remote(num_cpus=0)
    class WithTorch:
        def __init__(self, cuda: bool) -> None:
            import torch

            if cuda:  # the CUDA context, then cuBLAS (loaded at the first matmul)
                torch.ones(1, device="cuda").sum().item()
                x = torch.ones(64, 64, device="cuda")
                (x @ x).sum().item()

        def ready(self) -> bool:
            return True

    bare: Any = Bare  # mypy reads ray.remote's result as the class itself, without .remote
    with_torch: Any = WithTorch

    def spawn(make: Callable[[], Any]) -> None:
        actor = make()
        ray.get(actor.ready.remote())
        ray.kill(actor)

    for _ in range(repeat):
        began = time.perf_counter()
        ray.init(address="local", include_dashboard=False, _node_ip_address="127.0.0.1")
        out.setdefault("ray.init (a new local cluster)", []).append(time.perf_counter() - began)
        gpus = int(ray.cluster_resources().get("GPU", 0))
        cases: dict[str, Callable[[], Any]] = {
            "actor spawn until ready: bare": bare.remote,
            "actor spawn until ready: imports torch (CPU)": partial(with_torch.remote, False),
        }
        if gpus:
            cases["actor spawn until ready: torch, CUDA context, a matmul (1 GPU)"] = partial(
                with_torch.options(num_gpus=1).remote, True
            )
        for name, make in cases.items():
            out.setdefault(name, []).append(timed(partial(spawn, make)))
        out.setdefault("ray.shutdown", []).append(timed(ray.shutdown))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=3, help="runs of each measurement (default 3)")
    ap.add_argument("--no-docs", action="store_true", help="print only; do not touch docs/benchmarks.md")
    ap.add_argument("--section", default=SECTION, help=f"docs/benchmarks.md section to write (default {SECTION})")
    args = ap.parse_args()

    samples: dict[str, list[float]] = {}
    gpu = "no GPU" not in machine()
    foreign = foreign_plugins(installed_plugins())  # as tools/py/tests/conftest.py finds them
    with tempfile.TemporaryDirectory() as tmp:
        project = Path(tmp)
        (project / "test_one.py").write_text("def test_one():\n    assert 1 + 1 == 2\n")
        for _ in range(args.repeat):
            for name, code in PROCESSES.items():
                samples.setdefault(name, []).append(timed(partial(run_python, code)))
            samples.setdefault("nested pytest, one test", []).append(timed(lambda: nested_pytest(project)))
            if foreign:
                samples.setdefault(f"nested pytest, one test, {len(foreign)} foreign plugins blocked", []).append(
                    timed(lambda: nested_pytest(project, foreign))
                )
            for name, took in (cuda_steps() if gpu else {}).items():
                samples.setdefault(name, []).append(took)
    samples.update(ray_costs(args.repeat))

    header = ["cost", "median (s)", "min (s)", "runs"]
    rows = [[name, f"{statistics.median(s):.2f}", f"{min(s):.2f}", len(s)] for name, s in samples.items()]
    print_table("Fixed costs", header, rows)
    body = (
        "## Fixed costs per process, cluster and actor (bench/startup_costs.py, issue 17)\n\n"
        f"Measured {today()} on {machine()}, with `{' '.join([Path(sys.executable).name, *sys.argv])}`.\n\n"
        + md_table(header, rows)
        + "\n"
    )
    if not args.no_docs:
        update_section(args.section, body)
    print(body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
