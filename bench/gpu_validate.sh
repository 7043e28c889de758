#!/usr/bin/env bash
# GPU validation on a machine without uv (python3 with torch + transformers), e.g. an H200 box.
#
#   bash bench/gpu_validate.sh WHEEL_DIR [STEP ...]     STEP: unit mcore sft_megatron sft grpo throughput testmon (default: all)
#
# Installs the wheels the machine lacks (ray, omegaconf, math-verify, megatron-core, ...) into
# /tmp/site with --no-deps, then runs each step, writing logs and results to $OUT (or /tmp/gpu_out).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
WHEELS="${1:?usage: bash bench/gpu_validate.sh WHEEL_DIR [STEP ...]}"; shift
STEPS=("${@:-unit mcore sft_megatron sft grpo throughput testmon}")
read -r -a STEPS <<< "${STEPS[*]}"
OUT="${OUT:-/tmp/gpu_out}"; mkdir -p "$OUT"
export PYTHON=python3 PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 RAY_TMPDIR=/tmp/ray_gpu
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
python3 -c 'import ray' 2>/dev/null || python3 -m pip install -q --no-index --no-deps \
    --no-cache-dir --upgrade --target /tmp/site "$WHEELS"/*.whl || exit 2
export PYTHONPATH="$PWD:$PWD/tools/py:/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
# No install here (no uv, no registry, maybe no build backend): the harness comes from the
# checkout, so its pytest11 entry point does not exist; -p loads the same plugin by name.
export PYTEST_ADDOPTS="-p testharness.plugin${PYTEST_ADDOPTS:+ $PYTEST_ADDOPTS}"
nvidia-smi -L | tee "$OUT/gpus.txt"
python3 tests/unit/prepare_unit_test_assets.py >/dev/null || exit 2
rc=0
timed() {  # timed NAME CMD...: run, tee to $OUT/NAME.log, record wall seconds
    local name=$1; shift; local t0; t0=$(date +%s)
    "$@" > "$OUT/$name.log" 2>&1; local s=$?
    echo "$name exit=$s wall=$(( $(date +%s) - t0 ))s" | tee -a "$OUT/summary.txt"
    (( s == 0 )) || rc=1
}
for step in "${STEPS[@]}"; do
  case "$step" in
    unit)
      timed unit bash tests/run_unit.sh ${UNIT_ARGS:-}
      cp tests/unit/unit_results.json "$OUT/unit_results.json" ;;
    mcore)
      timed mcore bash tests/run_unit.sh --mcore-only ${MCORE_ARGS:-}
      cp tests/unit/unit_results.json "$OUT/mcore_results.json" ;;
    sft_megatron)
      timed sft_megatron bash tests/functional/sft_megatron.sh ;;
    sft)
      rm -rf /tmp/sft_gpu
      timed sft python3 examples/run_sft.py sft.max_num_steps=30 logger.log_dir=/tmp/sft_gpu/logs \
          checkpointing.checkpoint_dir=/tmp/sft_gpu/ck logger.gpu_monitor_interval_s=1
      python3 tests/json_dump_tb_logs.py /tmp/sft_gpu/logs --output_path "$OUT/sft_metrics.json" ;;
    grpo)
      timed grpo bash tests/functional/grpo.sh
      cp tests/functional/grpo/metrics.json "$OUT/grpo_metrics.json" 2>/dev/null ;;
    throughput)
      timed throughput python3 bench/throughput.py --gpus "$(nvidia-smi -L | wc -l)" ;;
    testmon)
      PYTEST_CMD="python3 -m pytest" WALK_LOGS="$OUT/testmon_walk" timed testmon bash .ci/testmon_walk.sh ;;
    *) echo "unknown step $step" >&2; rc=2 ;;
  esac
done
cat "$OUT/summary.txt"
exit $rc
