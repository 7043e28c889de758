#!/usr/bin/env bash
# GPU check of the Megatron-core path, for a machine without uv (python3 with torch + transformers).
#
#   bash bench/gpu_mcore_check.sh [WHEEL_DIR]        (default WHEEL_DIR: shared/wheels)
#
# 1. megatron-core: used if python3 imports it, else installed from WHEEL_DIR/megatron_core-*.whl
#    with --no-deps into /tmp/mcore_site (nothing outside /tmp is changed).
# 2. The mcore unit tests: python3 -m pytest -m mcore --mcore-only tests/unit/models/megatron
#    (logits parity, conversion, the worker through Ray, the SFT example; the TP=2 test runs when
#    two GPUs are visible, and is reported as skipped otherwise).
# 3. tests/functional/sft_megatron.sh (40 SFT steps through the Megatron worker + metric checks).
# Logs and junit XML go to $OUT when set (else /tmp/mcore_check). Exit status: 0 only if all passed.
set -uo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO_ROOT"
WHEEL_DIR="${1:-shared/wheels}"
OUT_DIR="${OUT:-/tmp/mcore_check}"
mkdir -p "$OUT_DIR"
export PYTHON=python3
# NVLink multicast must stay off on these shared machines.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export RAY_TMPDIR=/tmp/ray_mcore_check HF_HUB_OFFLINE="${HF_HUB_OFFLINE:-1}"
mkdir -p "$RAY_TMPDIR"

echo "== machine"
nvidia-smi -L || echo "nvidia-smi: not found"
python3 -c 'import sys, torch, transformers; print("python", sys.version.split()[0], "torch", torch.__version__, "transformers", transformers.__version__, "cuda GPUs", torch.cuda.device_count())'

SITE=/tmp/mcore_site
export PYTHONPATH="$REPO_ROOT:$REPO_ROOT/tools/py:$SITE${PYTHONPATH:+:$PYTHONPATH}"
if ! python3 -c 'import megatron.core' >/dev/null 2>&1; then
    shopt -s nullglob
    wheels=("$WHEEL_DIR"/megatron_core-*.whl)
    if (( ${#wheels[@]} == 0 )); then
        echo "error: megatron-core is not importable and no $WHEEL_DIR/megatron_core-*.whl to install" >&2
        exit 2
    fi
    echo "== installing ${wheels[*]} into $SITE"
    python3 -m pip install --quiet --no-deps --no-index --target "$SITE" "${wheels[@]}" || exit 2
fi
python3 -c 'import megatron.core as m; print("megatron-core", m.__version__)' || exit 2

echo "== assets"
python3 tests/unit/prepare_unit_test_assets.py || exit 2

rc=0
echo "== mcore unit tests"
start=$(date +%s)
python3 -m pytest -m mcore --mcore-only tests/unit/models/megatron -p no:cacheprovider -v -rs \
    --durations=0 --junitxml="$OUT_DIR/mcore_junit.xml" 2>&1 | tee "$OUT_DIR/mcore_pytest.log"
(( ${PIPESTATUS[0]} == 0 )) || rc=1
echo "== mcore unit tests took $(( $(date +%s) - start ))s"
cp tests/unit/unit_results.json "$OUT_DIR/mcore_unit_results.json" 2>/dev/null || true

echo "== functional: sft_megatron"
start=$(date +%s)
bash tests/functional/sft_megatron.sh 2>&1 | tail -n 60 > "$OUT_DIR/sft_megatron.log"
(( ${PIPESTATUS[0]} == 0 )) || rc=1
cat "$OUT_DIR/sft_megatron.log"
echo "== functional took $(( $(date +%s) - start ))s"
cp tests/functional/sft_megatron/metrics.json "$OUT_DIR/sft_megatron_metrics.json" 2>/dev/null || true

echo "== gpu_mcore_check: $([[ $rc == 0 ]] && echo PASS || echo FAIL)"
exit "$rc"
