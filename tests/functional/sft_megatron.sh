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
# The run and the checks are sft.sh's (same model, same data, same thresholds).
source "$(dirname "${BASH_SOURCE[0]}")/sft.sh"
SFT_OVERRIDES=(policy.megatron_cfg.enabled=true)
functional_parse_args "${BASH_SOURCE[0]}" "$@"   # --help and bad flags before the GPU probe

gpus=$("$PYTHON" -c 'import torch; print(torch.cuda.device_count())' 2>/dev/null || echo 0)
if [[ "$gpus" == "0" ]]; then
    echo "[functional] sft_megatron: SKIP (needs a CUDA GPU, none visible; megatron-core runs on GPU only here)"
    exit 0
fi
if ! "$PYTHON" -c 'import megatron.core' >/dev/null 2>&1; then
    echo "error: megatron-core is not importable by $PYTHON; run: uv run --extra mcore bash tests/functional/sft_megatron.sh" >&2
    exit 2
fi

sft_expected_steps "$@"
functional_main "$@"
