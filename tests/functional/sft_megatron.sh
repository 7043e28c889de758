#!/usr/bin/env bash
# Functional test: the short SFT run of sft.sh through the Megatron-core policy worker.
#
#   uv run --extra mcore bash tests/functional/sft_megatron.sh [key=value overrides ...]
#   uv run --extra mcore bash tests/functional/sft_megatron.sh policy.megatron_cfg.tensor_model_parallel_size=2 cluster.num_workers=2
#
# Needs a CUDA GPU (megatron-core's GPT forward is CUDA-only outside the unit tests' CPU shim):
# without one it prints a SKIP line and exits 0, so CI output says what did not run.
# Leaves tests/functional/sft_megatron/{logs/,run.log,metrics.json,checks.json}.
# num-gpus: 1
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

NUM_STEPS=40
VAL_PERIOD=10

gpus=$("$PYTHON" -c 'import torch; print(torch.cuda.device_count())' 2>/dev/null || echo 0)
if [[ "$gpus" == "0" ]]; then
    echo "[functional] sft_megatron: SKIP (needs a CUDA GPU, none visible; megatron-core runs on GPU only here)"
    exit 0
fi
if ! "$PYTHON" -c 'import megatron.core' >/dev/null 2>&1; then
    echo "error: megatron-core is not importable by $PYTHON; run: uv run --extra mcore bash tests/functional/sft_megatron.sh" >&2
    exit 2
fi

run_experiment() {
    functional_require_assets \
        tests/unit/test_assets/tiny_llama \
        tests/unit/test_assets/tokenizer \
        tests/unit/test_assets/data/sft_train.jsonl \
        tests/unit/test_assets/data/sft_val.jsonl
    functional_python examples/run_sft.py \
        policy.megatron_cfg.enabled=true \
        sft.max_num_steps="$NUM_STEPS" \
        sft.val_period="$VAL_PERIOD" \
        logger.log_dir="$LOG_DIR" \
        checkpointing.enabled=true \
        checkpointing.checkpoint_dir="$CKPT_DIR" \
        checkpointing.save_period=20 \
        "$@"
}

check_experiment() {
    # The same thresholds as sft.sh: the two backends train the same model on the same data.
    functional_check \
        "len(data[\"train/loss\"]) == $STEPS" \
        'max(data["train/loss"]) < 100' \
        'mean(data["train/loss"], -5) < 0.5 * mean(data["train/loss"], 1, 4)' \
        'len(data["val/loss"]) >= 2' \
        'max(data["val/loss"]) < 100' \
        'min(data["val/loss"]) < 0.6 * data["train/loss"]["1"]' \
        'max(data["train/grad_norm"]) < 1000' \
        'min(data["train/grad_norm"]) > 0'
}

STEPS=$NUM_STEPS
for arg in "$@"; do
    case "$arg" in sft.max_num_steps=*) STEPS="${arg#*=}" ;; esac
done

functional_main "$@"
