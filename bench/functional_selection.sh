#!/usr/bin/env bash
# Benchmark: run_all.sh recorded once, then --affected after a GRPO-only edit, timed side by
# side with the full run (the GPU half of issue 50's measurements; runs on the CPU box too).
#
#   uv run bash bench/functional_selection.sh                 # here
#   bash bench/functional_selection.sh WHEEL_DIR              # a GPU machine without uv (python3)
#   SCRIPTS="sft grpo" bash bench/functional_selection.sh ...  # only these scripts (default: all)
#
# Steps, each timed, logs in $OUT (default /tmp/functional_selection): the full run_all.sh
# (records every script's reach), --affected with no edit (runs nothing), the GRPO-only edit
# (one line in the body of nemo_rl.algorithms.grpo.group_advantages, harmless: + 0.0) and its
# --affected --list and --affected runs, the edit undone. Without a .git (a copied tree), a
# throwaway repository is made first: the reach compares files as git lists them.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
OUT="${OUT:-/tmp/functional_selection}"; mkdir -p "$OUT"
if [[ $# -ge 1 ]]; then   # a machine without uv: the wheels, and the checkout's harness
    python3 -c 'import ray' 2>/dev/null || python3 -m pip install -q --no-index --no-deps \
        --no-cache-dir --upgrade --target /tmp/site "$1"/*.whl || exit 2
    export PYTHON=python3 PYTHONPATH="$PWD:$PWD/tools/py:/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
    export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
fi
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1
if [[ ! -d .git ]]; then
    git init -q && git add -A && git -c user.name=bench -c user.email=bench@localhost commit -qm "bench base" || exit 2
fi
"${PYTHON:-python}" tests/unit/prepare_unit_test_assets.py >/dev/null || exit 2
timed() {  # timed NAME CMD...: run, log to $OUT/NAME.log, print and keep the wall seconds
    local name=$1; shift; local t0; t0=$(date +%s%3N)
    "$@" >"$OUT/$name.log" 2>&1; local s=$? ms=$(( $(date +%s%3N) - t0 ))
    printf '%-22s exit=%s wall=%d.%03ds\n' "$name" "$s" $(( ms / 1000 )) $(( ms % 1000 )) | tee -a "$OUT/summary.txt"
}
EDIT_FILE=nemo_rl/algorithms/grpo.py
OLD='    adv = grouped - grouped.mean(dim=1, keepdim=True)'
grep -qxF "$OLD" "$EDIT_FILE" || { echo "the GRPO-only line is not in $EDIT_FILE" >&2; exit 2; }
: >"$OUT/summary.txt"
read -r -a NAMES <<<"${SCRIPTS:-}"
timed full bash tests/functional/run_all.sh "${NAMES[@]}"
timed no_edit_affected bash tests/functional/run_all.sh --affected "${NAMES[@]}"
cp "$EDIT_FILE" "$OUT/grpo.py.orig"
sed -i "s/^$OLD\$/$OLD + 0.0/" "$EDIT_FILE"
timed grpo_edit_list bash tests/functional/run_all.sh --affected --list "${NAMES[@]}"
timed grpo_edit_affected bash tests/functional/run_all.sh --affected "${NAMES[@]}"
cp "$OUT/grpo.py.orig" "$EDIT_FILE"
cat "$OUT/grpo_edit_list.log"
tail -n 12 "$OUT/full.log" "$OUT/grpo_edit_affected.log"
