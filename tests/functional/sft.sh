#!/usr/bin/env bash
# Functional test: a short real SFT run on the tiny offline assets, then metric checks.
#
#   uv run bash tests/functional/sft.sh [key=value overrides for examples/run_sft.py ...]
#   uv run bash tests/functional/sft.sh policy.optimizer.lr=0     # must end in FAIL
#
# The overrides are checked first (examples/run_sft.py --check-config): a bad one is refused
# with one line, exit 2, before anything trains.
# Leaves tests/functional/sft/{logs/,run.log,metrics.json,checks.json}.
# num-gpus: 0
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

# Enough steps for the tiny model to learn on CPU in well under a minute of training.
NUM_STEPS=40
VAL_PERIOD=10
SFT_OVERRIDES=()   # variants that reuse this script (sft_megatron.sh, ...) put their switches here

# The run's arguments in SFT_ARGS: the script's settings, then the user's overrides ("$@").
sft_args() {
    SFT_ARGS=("${SFT_OVERRIDES[@]}"
        sft.max_num_steps="$NUM_STEPS"
        sft.val_period="$VAL_PERIOD"
        logger.log_dir="$LOG_DIR"
        checkpointing.enabled=true
        checkpointing.checkpoint_dir="$CKPT_DIR"
        checkpointing.save_period=20
        "$@")
}

precheck_experiment() {
    sft_args "$@"
    functional_check_config examples/run_sft.py "${SFT_ARGS[@]}"
}

run_experiment() {
    functional_require_assets \
        tests/unit/test_assets/tiny_llama \
        tests/unit/test_assets/tokenizer \
        tests/unit/test_assets/data/sft_train.jsonl \
        tests/unit/test_assets/data/sft_val.jsonl || return $?
    sft_args "$@"
    functional_python examples/run_sft.py "${SFT_ARGS[@]}"
}

# The checks (SFT_CHECKS): check_experiment's, and the base of a variant's that adds its own.
sft_checks() {
    # Thresholds have a wide margin on a healthy run (late loss ~0.2x the first, val
    # loss ~0.2x the untrained loss) and are missed by a run that does not learn.
    SFT_CHECKS=(
        "len(data[\"train/loss\"]) == $STEPS"
        'max(data["train/loss"]) < 100'
        'mean(data["train/loss"], -5) < 0.5 * mean(data["train/loss"], 1, 4)'
        'len(data["val/loss"]) >= 2'
        'max(data["val/loss"]) < 100'
        'min(data["val/loss"]) < 0.6 * data["train/loss"]["1"]'
        'max(data["train/grad_norm"]) < 1000'
        'min(data["train/grad_norm"]) > 0')
}

check_experiment() {
    sft_checks
    functional_check "${SFT_CHECKS[@]}"
}

# The step count the checks expect follows a sft.max_num_steps=N override.
sft_expected_steps() {
    STEPS=$NUM_STEPS
    for arg in "$@"; do
        case "$arg" in sft.max_num_steps=*) STEPS="${arg#*=}" ;; esac
    done
}

# Run only when executed; a variant sources this file for its functions and runs itself.
if [[ "${BASH_SOURCE[0]}" == "$0" ]]; then
    sft_expected_steps "$@"
    functional_main "$@"
fi
