#!/usr/bin/env bash
# Functional test: the short SFT run of sft.sh on two policy workers (data parallel: each takes
# half of every batch; FSDP2 over gloo on CPU, NCCL with a GPU per worker), then sft.sh's checks
# and one more: the run logged that it trained on two workers.
#
#   uv run bash tests/functional/sft_two_workers.sh [key=value overrides for examples/run_sft.py ...]
#   uv run bash tests/functional/sft_two_workers.sh policy.optimizer.lr=0     # must end in FAIL
#   uv run bash tests/functional/sft_two_workers.sh cluster.num_workers=1     # must end in FAIL
#
# The overrides are checked first (examples/run_sft.py --check-config). Two CPU workers fit a
# 2-core machine; with two GPUs visible to Ray each worker takes one.
# Leaves tests/functional/sft_two_workers/{logs/,run.log,metrics.json,checks.json}.
# num-gpus: 0
# The run and its checks are sft.sh's (same model, data, steps and thresholds).
source "$(dirname "${BASH_SOURCE[0]}")/sft.sh"
SFT_OVERRIDES=(cluster.num_workers=2)

check_experiment() {
    # run/num_workers: the policy's world size, logged with the first step.
    sft_checks
    functional_check "${SFT_CHECKS[@]}" 'data["run/num_workers"]["1"] == 2'
}

sft_expected_steps "$@"
functional_main "$@"
