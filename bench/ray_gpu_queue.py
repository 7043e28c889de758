"""Does Ray place GPU requests in the order they came? (the -n tail on one GPU, issue 17)

On a real local Ray cluster that declares one logical GPU (no GPU needed): a quarter of the GPU
is held; a placement group asks for the whole GPU, then another asks for a quarter. Printed:
each request's state, then again after the first quarter is released. Under `-n` a test module
whose worker takes a whole GPU waits this way behind the quarter-GPU tests of other workers.

    uv run --group test python bench/ray_gpu_queue.py [--no-docs]

Writes its table to docs/benchmarks.md's section "ray-gpu-queue" unless --no-docs.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _bench_common import machine, md_table, print_table, today, update_section  # noqa: E402

SETTLE_S = 5.0  # far above Ray's scheduling round trip on a local cluster (milliseconds)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--no-docs", action="store_true", help="print only; do not touch docs/benchmarks.md")
    args = ap.parse_args()
    import ray
    from ray.util.placement_group import (
        PlacementGroup,
        placement_group,
        placement_group_table,
        remove_placement_group,
    )

    def request(gpu: float) -> PlacementGroup:
        pg: PlacementGroup = placement_group([{"GPU": gpu, "CPU": 0.1}])
        return pg

    def state(pg: PlacementGroup) -> str:
        return str(placement_group_table(pg)["state"])

    ray.init(num_cpus=2, num_gpus=1, include_dashboard=False)
    try:
        held = request(0.25)
        ray.get(held.ready(), timeout=60)
        whole = request(1.0)
        time.sleep(SETTLE_S)
        later = request(0.25)
        time.sleep(SETTLE_S)
        rows = [["a quarter held; whole GPU asked, then a quarter", state(whole), state(later)]]
        remove_placement_group(held)
        time.sleep(2 * SETTLE_S)
        rows.append(["the held quarter released", state(whole), state(later)])
    finally:
        ray.shutdown()
    header = ["moment", "whole GPU (asked first)", "quarter (asked later)"]
    print_table(f"Ray {ray.__version__} placement order, one logical GPU", header, rows)
    if not args.no_docs:
        update_section(
            "ray-gpu-queue",
            "## Ray's placement order for GPU requests (bench/ray_gpu_queue.py, issue 17)\n\n"
            f"Measured {today()} on {machine()}, Ray {ray.__version__}, a local cluster declaring one "
            f"logical GPU; the whole GPU is asked {SETTLE_S:g} s before the second quarter.\n\n"
            + md_table(header, rows)
            + "\n",
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
