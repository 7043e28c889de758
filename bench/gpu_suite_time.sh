#!/usr/bin/env bash
# bench/suite_time.py on a GPU machine without uv (python3 with torch + transformers), e.g. one H200.
# A serial + `-n auto` suite run outlasts one 10-minute command there, so it runs in a session
# of its own and a second command collects it:
#
#   bash bench/gpu_suite_time.sh WHEEL_DIR start SECONDS [suite_time.py args]  # install, assets, start; wait SECONDS
#   bash bench/gpu_suite_time.sh WHEEL_DIR wait SECONDS                        # wait again; files to $OUT
#
# Installs into /tmp/site (--no-deps) the wheels of WHEEL_DIR whose package python3 lacks, and
# always the test tools, Ray and Hugging Face's packages (their versions must match the lock).
# WHEEL_DIR holds a wheel of tools/py too: its entry point loads the harness as `uv sync` would.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
WHEELS="${1:?usage: bash bench/gpu_suite_time.sh WHEEL_DIR start|wait SECONDS [args]}"
MODE="${2:?start or wait}"; SECONDS_MAX="${3:-540}"; shift 3 || shift $#
OUT="${OUT:-/tmp/gpu_out}"; WORK=/tmp/gpu_suite; mkdir -p "$OUT" "$WORK"
export PYTHON=python3 PYTHONUNBUFFERED=1  # no HF_HUB_OFFLINE: the suite is offline by construction
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONPATH="/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
export PATH="/tmp/site/bin:$PATH"  # console scripts of the wheels (py-spy for the hang dumps)

if [[ "$MODE" == start ]]; then
    # The suite runs from a copy: the device tool copies the working tree over the checkout
    # again for the `wait` call, which would land under the running suite.
    rm -rf "$WORK/repo" && mkdir "$WORK/repo" || exit 2
    tar --exclude=./.venv --exclude=./.git -cf - . | tar -xf - -C "$WORK/repo" && cd "$WORK/repo" || exit 2
    bash bench/gpu_install.sh "$WHEELS" || exit 2
    PYTHONPATH="$PWD:$PWD/tools/py:$PYTHONPATH" python3 tests/unit/prepare_unit_test_assets.py >/dev/null || exit 2
    setsid nohup python3 bench/suite_time.py --no-uv --no-docs --md "$WORK/suite_time.md" "$@" \
        > "$WORK/suite.log" 2>&1 < /dev/null &
    echo $! > "$WORK/pid"
fi
pid=$(cat "$WORK/pid")
t0=$(date +%s)
while kill -0 "$pid" 2>/dev/null && (( $(date +%s) - t0 < SECONDS_MAX )); do sleep 5; done
if kill -0 "$pid" 2>/dev/null; then echo "suite_time still running (pid $pid)"; else echo "suite_time finished"; fi
uptime > "$OUT/uptime.txt"
cp "$WORK"/suite_time.md "$WORK"/suite.log "$OUT"/ 2>/dev/null
grep -E "^(suite_time|run_unit):|passed|failed|FAILED|ERROR " "$WORK/suite.log" | tail -60
