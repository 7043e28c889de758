#!/usr/bin/env bash
# Functional test: a short SFT warm-up on the math problems, then GRPO from that checkpoint,
# then metric checks that fail when GRPO does not learn.
#
#   uv run bash tests/functional/grpo.sh [key=value overrides for examples/run_grpo_math.py ...]
#   uv run bash tests/functional/grpo.sh policy.optimizer.lr=0     # must end in FAIL
#
# The overrides are checked first, with the warm-up's config (--check-config of both
# examples): a bad one is refused with one line, exit 2, before the warm-up starts.
# Leaves tests/functional/grpo/{logs/,run.log,metrics.json,checks.json}.
# num-gpus: 0
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

SFT_STEPS=200      # warm-up: the tiny model learns the answer format and ~40% of the sums
NUM_STEPS=60
VAL_PERIOD=20
DATA=tests/unit/test_assets/data

# The warm-up's arguments (WARMUP_ARGS) and GRPO's (GRPO_ARGS: the script's settings, then the
# user's overrides "$@"; the run puts policy.init_from_sft=<the warm-up checkpoint> first).
grpo_args() {
    WARMUP_ARGS=(sft.max_num_steps="$SFT_STEPS" sft.val_period=0
        data.train_path="$DATA/math_sft_train.jsonl" data.val_path="$DATA/math_sft_val.jsonl"
        logger.log_dir="$EXP_DIR/sft_logs" logger.monitor_gpus=false
        checkpointing.checkpoint_dir="$CKPT_DIR/sft" checkpointing.save_period="$SFT_STEPS")
    GRPO_ARGS=(grpo.max_num_steps="$NUM_STEPS" grpo.val_period="$VAL_PERIOD" grpo.val_num_prompts=128
        grpo.num_prompts_per_step=16 policy.train_global_batch_size=128 policy.optimizer.lr=3.0e-4
        logger.log_dir="$LOG_DIR"
        checkpointing.checkpoint_dir="$CKPT_DIR/grpo" checkpointing.save_period=30
        "$@")
}

precheck_experiment() {
    grpo_args "$@"
    functional_check_config examples/run_sft.py "${WARMUP_ARGS[@]}" || return $?
    functional_check_config examples/run_grpo_math.py "${GRPO_ARGS[@]}"
}

run_experiment() {
    functional_require_assets tests/unit/test_assets/tiny_llama "$DATA/math_sft_train.jsonl" \
        "$DATA/math_train.jsonl" "$DATA/math_val.jsonl" || return $?
    grpo_args "$@"
    echo "[functional] grpo: SFT warm-up ($SFT_STEPS steps)"
    functional_python examples/run_sft.py "${WARMUP_ARGS[@]}" || return $?
    echo "[functional] grpo: GRPO ($NUM_STEPS steps) from the warm-up checkpoint"
    functional_python examples/run_grpo_math.py policy.init_from_sft="$CKPT_DIR/sft" "${GRPO_ARGS[@]}"
}

check_experiment() {
    # A healthy run: greedy validation accuracy gains ~10+ points over the warm-up model and the
    # sampled reward of the last steps beats the first ones; lr=0 leaves both where they were.
    functional_check \
        "len(data[\"train/reward\"]) == $STEPS" \
        'mean(data["val/accuracy"], -1) > data["val/accuracy"]["0"] + 0.04' \
        'mean(data["train/reward"], -20) > mean(data["train/reward"], 1, 21)' \
        'max(data["train/loss"]) < 10 and min(data["train/loss"]) > -10' \
        'max(data["train/kl"]) < 0.5' \
        'max(data["train/grad_norm"]) < 1000' \
        'min(data["train/mean_gen_tokens"]) > 3'
}

STEPS=$NUM_STEPS
for arg in "$@"; do
    case "$arg" in grpo.max_num_steps=*) STEPS="${arg#*=}" ;; esac
done

functional_main "$@"
