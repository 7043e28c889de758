#!/usr/bin/env bash
# Functional test: SFT resumed from a checkpoint. A first run trains half the steps and saves a
# checkpoint; a second run with the same config finds it, loads weights, optimizer, scheduler
# and step, and trains on to the end. The checks fail when the second run starts over.
#
#   uv run bash tests/functional/sft_resume.sh [key=value overrides for examples/run_sft.py ...]
#   uv run bash tests/functional/sft_resume.sh sft.max_num_steps=40   # 20 steps, then 20 more resumed
#   uv run bash tests/functional/sft_resume.sh checkpointing.enabled=false   # no resume: must end in FAIL
#
# The overrides go to both runs and are checked first (examples/run_sft.py --check-config).
# Leaves tests/functional/sft_resume/{logs/,run.log,metrics.json,checks.json}; both runs log
# into logs/, the first steps 1..N, the resumed one N+1..2N.
# num-gpus: 0
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

NUM_STEPS=30   # both runs together; the first stops (and saves) at half of it

# The user's overrides without sft.max_num_steps (USER_ARGS); STEPS (the total) and HALF from it.
resume_split_args() {
    STEPS=$NUM_STEPS
    USER_ARGS=()
    local arg
    for arg in "$@"; do
        case "$arg" in
            sft.max_num_steps=*) STEPS="${arg#*=}" ;;
            *) USER_ARGS+=("$arg") ;;
        esac
    done
    HALF=0
    if [[ "$STEPS" =~ ^[0-9]+$ ]]; then HALF=$(( STEPS / 2 )); fi
}

# The arguments of a run that stops at step $1 (RUN_ARGS); both runs share the checkpoint dir.
resume_run_args() {
    RUN_ARGS=(sft.max_num_steps="$1"
        sft.val_period="$HALF"
        logger.log_dir="$LOG_DIR"
        checkpointing.enabled=true
        checkpointing.checkpoint_dir="$CKPT_DIR"
        checkpointing.save_period="$HALF"
        "${USER_ARGS[@]}")
}

precheck_experiment() {
    resume_split_args "$@"
    if ! [[ "$STEPS" =~ ^[0-9]+$ ]] || (( STEPS < 10 )); then
        echo "error: sft.max_num_steps must be an integer >= 10 here (two runs of half of it each), got '$STEPS'" >&2
        return 2
    fi
    resume_run_args "$STEPS"
    functional_check_config examples/run_sft.py "${RUN_ARGS[@]}"
}

run_experiment() {
    functional_require_assets \
        tests/unit/test_assets/tiny_llama \
        tests/unit/test_assets/tokenizer \
        tests/unit/test_assets/data/sft_train.jsonl \
        tests/unit/test_assets/data/sft_val.jsonl || return $?
    resume_split_args "$@"
    echo "[functional] sft_resume: first run, steps 1..$HALF (checkpoint at $HALF)"
    resume_run_args "$HALF"
    functional_python examples/run_sft.py "${RUN_ARGS[@]}" || return $?
    echo "[functional] sft_resume: second run, resumed from the checkpoint, on to step $STEPS"
    resume_run_args "$STEPS"
    functional_python examples/run_sft.py "${RUN_ARGS[@]}"
}

check_experiment() {
    # run/first_step is logged with each run's first step: 1 and HALF+1 when the second run
    # resumed (a run that starts over logs 1 again, over the first run's). The resumed run's first
    # loss is the first run's next one (~2.1 after ~2.5-2.9; untrained ~7.0); with the optimizer's
    # moments lost the gradient norm jumps (~1.3 -> ~3.3 over the next 5 steps); and it goes on
    # learning: its last validation loss is below the checkpoint's.
    local next=$(( HALF + 1 ))
    functional_check \
        "len(data[\"train/loss\"]) == $STEPS" \
        'len(data["run/first_step"]) == 2' \
        "data[\"run/first_step\"][\"$next\"] == $next" \
        "data[\"train/loss\"][\"$next\"] < 0.5 * data[\"train/loss\"][\"1\"]" \
        "data[\"train/loss\"][\"$next\"] < 1.3 * mean(data[\"train/loss\"], $(( HALF - 2 )), $next)" \
        "mean(data[\"train/grad_norm\"], $next, $(( next + 5 ))) < mean(data[\"train/grad_norm\"], $(( next - 5 )), $next)" \
        "data[\"val/loss\"][\"$STEPS\"] < data[\"val/loss\"][\"$HALF\"]" \
        'max(data["train/grad_norm"]) < 1000'
}

resume_split_args "$@"
functional_main "$@"
