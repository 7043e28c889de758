#!/usr/bin/env bash
# The developer loop on a GPU machine without uv (issue 36), in one device call:
#
#   bash bench/gpu_loop.sh WHEEL_DIR [STEP ...]    STEP: shared (default), suite, edit, edit_cold, edit_warm, long, warm, preload
#
#   shared  the harness's GPU tests of shared GPUs: two tests' trackers on one GPU, CUDA leases
#   suite   the README's library suite with -n auto (bash tests/run_unit.sh -n auto; the checkout
#           on PYTHONPATH, as uv's editable install puts it: the example tests run the scripts
#           as a user does); its record is copied to $OUT/suite_results.json
#   edit    bench/edit_to_result.py -n auto with a one-line edit inside the policy actor (warm Ray
#           workers as the suite's default gives them: docs/unit-tests.md)
#   edit_cold  the same without warm Ray workers (NRL_WARM_WORKERS=0)
#   edit_warm  the same with NRL_WARM_WORKERS=$WARM_WORKERS (default 3: the fsdp test's three
#           actors); edit and one of these in one call: the arms side by side on one machine
#   long    bench/long_test_phases.py: the two long tests alone, phase by phase
#   warm    bench/warm_worker_probe.py: an actor's start in a new process and in a warm one
#   preload tests/unit/distributed/test_warm_workers.py: a warm worker's imports leave CUDA to
#           the actor's CUDA_VISIBLE_DEVICES (the check behind the several-GPU default)
#
# The edit steps keep every run's log and every process's timeline (--trace) in $OUT/STEP_runs.
#
# Issue 36's four figures in one call: bash bench/gpu_loop.sh .whl suite edit long shared warm
# Warm Ray workers (the default) against none, side by side: bash bench/gpu_loop.sh .whl edit edit_cold
#
# Installs the carried wheels first (bench/gpu_install.sh); logs and tables go to $OUT. Every
# step runs with the pytest plugins uv.lock has (bench/lock_plugins.py; IMAGE_PLUGINS=1: the image's too)
# and with bytecode cached (IMAGE_BYTECODE=1: as the machine has it).
# PACK_OUT=1 packs what it wrote into $OUT/gpu_loop.tgz beside $OUT/summary.txt.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
WHEELS="${1:?usage: bash bench/gpu_loop.sh WHEEL_DIR [shared|suite|edit|edit_cold|edit_warm|long|warm|preload ...]}"; shift
STEPS=("${@:-shared}")
OUT="${OUT:-/tmp/gpu_out}"; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
bash bench/gpu_install.sh "$WHEELS" || exit 2
export PYTHONPATH="/tmp/site${PYTHONPATH:+:$PYTHONPATH}" PATH="/tmp/site/bin:$PATH"
# The pytest plugins of uv's environment only, as the README's runs have them: the image's own
# (not in uv.lock) are blocked in every pytest process. IMAGE_PLUGINS=1 keeps them.
[[ "${IMAGE_PLUGINS:-0}" == 1 ]] || export PYTEST_ADDOPTS="$(python3 bench/lock_plugins.py 2> >(tee -a "$OUT/summary.txt" >&2))"
# Bytecode cached as a developer's Python caches it: the machine sets PYTHONDONTWRITEBYTECODE=1,
# and its image ships torch and sympy without .pyc files: every process of every run would compile
# them again (the actor edit 33.1 s instead of 23.8 s on one H100: docs/benchmarks.md). Unset, the first run (an edit step's seed) writes the missing ones beside
# their sources (root owns them here) and every later process reads them; the .pyc files pip
# wrote for the carried wheels stay in use (a PYTHONPYCACHEPREFIX would hide them).
# IMAGE_BYTECODE=1 keeps the machine's setting.
bytecode_report() {  # $1: before or after the steps; the harness's own check (testharness.bytecode)
  python3 - "$1" <<'EOF' | tee -a "$OUT/summary.txt"
import os, sys
from testharness.bytecode import HEAVY_PACKAGES, compiled_again
uncached = compiled_again(HEAVY_PACKAGES, may_write=False)  # whatever the setting: what has no .pyc
listed = ", ".join(f"{name} (in {where})" for name, where in uncached.items()) or "none"
print(f"bytecode {sys.argv[1]}: of {', '.join(HEAVY_PACKAGES)}, without .pyc files: {listed}")
print(f"bytecode {sys.argv[1]}: PYTHONDONTWRITEBYTECODE={os.environ.get('PYTHONDONTWRITEBYTECODE', '')!r}")
EOF
}
bytecode_report before
# A GPU machine lent as a virtual machine may grow its memory only as it is first used (seen on
# such machines: MemTotal up 8 GiB per 3 s): the summary reads it before and after each step.
mem_total() { awk '/^MemTotal/ {printf "MemTotal=%.1fGiB", $2 / 1048576}' /proc/meminfo; }
echo "before the steps: $(mem_total)" | tee -a "$OUT/summary.txt"
[[ "${IMAGE_BYTECODE:-0}" == 1 ]] || unset PYTHONDONTWRITEBYTECODE
PYTHONPATH="$PWD:$PWD/tools/py:$PYTHONPATH" python3 tests/unit/prepare_unit_test_assets.py >/dev/null || exit 2
EDIT=nemo_rl/models/policy/workers/dtensor_policy_worker.py::DTensorPolicyWorker._reduce_and_clip_grads
rc=0
for step in "${STEPS[@]}"; do
  t0=$(date +%s)
  case "$step" in
    shared) python3 -m pytest -q -p no:randomly -rs tools/py/tests/test_gpu_shared_memory.py \
              tools/py/tests/test_parallel_gpus.py tests/unit/utils/test_gpu_memory.py ;;
    suite) PYTHONPATH="$PWD:$PYTHONPATH" PYTHON=python3 bash tests/run_unit.sh -n auto --durations=15 \
             && cp tests/unit/unit_results.json "$OUT/suite_results.json" ;;
    edit) python3 bench/edit_to_result.py -n auto --edit "$EDIT" --no-baseline --no-docs --phases --trace --logs "$OUT/edit_runs" ;;
    edit_cold) NRL_WARM_WORKERS=0 python3 bench/edit_to_result.py -n auto --edit "$EDIT" --no-baseline --no-docs \
                 --phases --trace --logs "$OUT/edit_cold_runs" ;;
    edit_warm) NRL_WARM_WORKERS="${WARM_WORKERS:-3}" python3 bench/edit_to_result.py -n auto --edit "$EDIT" --no-baseline --no-docs \
                 --phases --trace --logs "$OUT/edit_warm_runs" ;;
    long) python3 bench/long_test_phases.py --repeat 1 ;;
    warm) python3 bench/warm_worker_probe.py --actors 4 ;;
    preload) PYTHONPATH="$PWD:$PWD/tools/py:$PYTHONPATH" python3 -m pytest -q -p no:randomly -rs tests/unit/distributed/test_warm_workers.py ;;
    *) echo "unknown step $step" >&2; exit 2 ;;
  esac > "$OUT/$step.log" 2>&1
  s=$?; (( s == 0 )) || rc=1
  echo "$step exit=$s wall=$(( $(date +%s) - t0 ))s $(mem_total)" | tee -a "$OUT/summary.txt"
  tail -25 "$OUT/$step.log"
done
bytecode_report after
# PACK_OUT=1: all but summary.txt as one archive, $OUT/gpu_loop.tgz (a caller that takes back a
# few files only, as the device tool of docs/benchmarks.md does: at most 8).
if [[ "${PACK_OUT:-0}" == 1 ]]; then
  tar czf /tmp/gpu_loop.tgz -C "$OUT" --exclude=./summary.txt . \
    && find "$OUT" -mindepth 1 -maxdepth 1 ! -name summary.txt -exec rm -rf {} + \
    && mv /tmp/gpu_loop.tgz "$OUT/gpu_loop.tgz"
fi
exit $rc
