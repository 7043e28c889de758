#!/usr/bin/env bash
# Functional test: evaluation of a training run's checkpoints. A short SFT on the math problems
# (as chat) saves two checkpoints; examples/run_eval.py then scores the untrained model (step 0)
# and each checkpoint: eval/loss on the held-out chats, eval/accuracy of greedy answers on the
# held-out problems. The checks fail when a checkpoint is not the model that was evaluated.
#
#   uv run bash tests/functional/eval.sh [key=value overrides for examples/run_eval.py ...]
#   uv run bash tests/functional/eval.sh eval.max_new_tokens=4     # answers cut short: must end in FAIL
#
# The overrides are checked first (examples/run_eval.py --check-config, and the SFT's), before
# the SFT starts; they go to the evaluation only.
# Leaves tests/functional/eval/{logs/,run.log,metrics.json,checks.json}; logs/sft holds the
# SFT's scalars, logs/eval the evaluation's.
# num-gpus: 0
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

SFT_STEPS=60   # the tiny model gets ~10% of the sums right after 60 steps, 0% before
DATA=tests/unit/test_assets/data

# The SFT's arguments (SFT_ARGS) and the evaluation's (EVAL_ARGS: the script's settings, then the
# user's overrides "$@"). The SFT validates at its last step on the 192 records (6 x 32) that the
# evaluation's eval/loss covers, so both runs score the last checkpoint on the same data.
eval_args() {
    SFT_ARGS=(sft.max_num_steps="$SFT_STEPS" sft.val_period="$SFT_STEPS" sft.val_batches=6
        data.train_path="$DATA/math_sft_train.jsonl" data.val_path="$DATA/math_sft_val.jsonl"
        logger.log_dir="$LOG_DIR/sft"
        checkpointing.enabled=true checkpointing.checkpoint_dir="$CKPT_DIR"
        checkpointing.save_period=$(( SFT_STEPS / 2 )) checkpointing.keep_top_k=2)
    EVAL_ARGS=(eval.base_model=true eval.num_prompts=200 eval.loss_batch_size=32
        data.val_path="$DATA/math_sft_val.jsonl" data.math_path="$DATA/math_val.jsonl"
        logger.log_dir="$LOG_DIR/eval"
        "$@")
}

precheck_experiment() {
    eval_args "$@"
    functional_check_config examples/run_sft.py "${SFT_ARGS[@]}" || return $?
    # The checkpoints do not exist yet: the evaluation is checked without them.
    functional_check_config examples/run_eval.py eval.checkpoint_dir=null "${EVAL_ARGS[@]}"
}

run_experiment() {
    functional_require_assets tests/unit/test_assets/tiny_llama "$DATA/math_sft_train.jsonl" \
        "$DATA/math_sft_val.jsonl" "$DATA/math_val.jsonl" || return $?
    eval_args "$@"
    echo "[functional] eval: SFT ($SFT_STEPS steps, checkpoints at $(( SFT_STEPS / 2 )) and $SFT_STEPS)"
    functional_python examples/run_sft.py "${SFT_ARGS[@]}" || return $?
    echo "[functional] eval: the untrained model and both checkpoints"
    functional_python examples/run_eval.py eval.checkpoint_dir="$CKPT_DIR" "${EVAL_ARGS[@]}"
}

check_experiment() {
    # A healthy run: eval/loss ~7.1 untrained, ~0.33 and ~0.26 at the checkpoints, the last one
    # equal to the SFT's own val/loss there (same weights, same records); eval/accuracy 0 -> ~0.1.
    local half=$(( SFT_STEPS / 2 )) last=$SFT_STEPS
    functional_check \
        'len(data["eval/loss"]) == 3' \
        "data[\"eval/loss\"][\"$last\"] < 0.2 * data[\"eval/loss\"][\"0\"]" \
        "data[\"eval/loss\"][\"$last\"] < data[\"eval/loss\"][\"$half\"]" \
        "abs(data[\"eval/loss\"][\"$last\"] - data[\"val/loss\"][\"$last\"]) < 0.01 * data[\"val/loss\"][\"$last\"]" \
        'len(data["eval/accuracy"]) == 3' \
        "data[\"eval/accuracy\"][\"$last\"] > data[\"eval/accuracy\"][\"0\"] + 0.04"
}

functional_main "$@"
