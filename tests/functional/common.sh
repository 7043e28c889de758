# Helpers sourced by every functional test script (tests/functional/<name>.sh).
#
# A functional script defines two functions and hands over to `functional_main`:
#
#   run_experiment "$@"   the real run; write TensorBoard logs to $LOG_DIR and
#                         checkpoints to $CKPT_DIR; "$@" = the user's config overrides
#   check_experiment      `functional_check 'CHECK' ...` over $JSON_METRICS
#
# functional_main gives it: the experiment name from the script name, a fresh
# tests/functional/<name>/ with logs/, run.log (a tee of everything) and metrics.json,
# missing test assets built first, the run under `coverage run -a` (data file
# tests/.coverage, source nemo_rl; with a parallel-mode coverage config the per-process
# files, Ray workers' included, are combined into it), the checkpoint directory removed
# on exit, then the TensorBoard dump and the metric checks. The exit status is the
# run's when it failed, else the checks'.
#
# What the run reached is recorded for `run_all.sh --affected` (docs/functional-tests.md,
# "Running only what an edit affects"): its own coverage data and the files its driver read
# go to tests/functional/<name>/reach/; when it passes without config overrides,
# `testharness functional record` keeps them in the reach file ([tool.testharness.functional]);
# when it fails, the record says so and the script runs again until it passes.
#
# Each script also declares how many GPUs it needs in a header line that run_all.sh
# reads:   # num-gpus: 0      (0 = runs on CPU, so CI runs it)
#
# Arguments, before anything runs: -h/--help prints the script's header comment and exits
# 0; any other argument starting with '-' is refused (one line, exit 2). A script may define
#
#   precheck_experiment "$@"  checks the overrides (e.g. `functional_check_config
#                             examples/run_sft.py ... "$@"`); a failure ends the script
#                             with its status before the experiment directory is touched
#
# Works from any cwd, under `uv run` (python = the project venv) or with plain python:
# set PYTHON=/path/to/python to choose the interpreter.

set -euo pipefail

# The repo root, from this file's own location (not the caller's cwd).
REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
FUNCTIONAL_STARTED_IN="$PWD"   # relative script paths are relative to it
FUNCTIONAL_DIR="$REPO_ROOT/tests/functional"

# Interpreter: $PYTHON; else `python` inside an active venv (`uv run` activates the
# project's); else the repo's .venv (e.g. `uv run` started outside the checkout);
# else python, python3.
if [[ -z "${PYTHON:-}" ]]; then
    if [[ -n "${VIRTUAL_ENV:-}" ]] && command -v python >/dev/null 2>&1; then
        PYTHON=python
    elif [[ -x "$REPO_ROOT/.venv/bin/python" ]]; then
        PYTHON="$REPO_ROOT/.venv/bin/python"
    elif command -v python >/dev/null 2>&1; then
        PYTHON=python
    else
        PYTHON=python3
    fi
fi
export PYTHON

COVERAGE_DATA_FILE="${COVERAGE_DATA_FILE:-$REPO_ROOT/tests/.coverage}"
COVERAGE_SOURCE="${COVERAGE_SOURCE:-nemo_rl}"
FUNCTIONAL_INPUTS=()   # files a run depends on besides what its driver reads (the asset builder)

# The harness's commands (`testharness ...`), with the checkout's copy when it is not installed.
functional_harness() {
    PYTHONPATH="$REPO_ROOT/tools/py${PYTHONPATH:+:$PYTHONPATH}" "$PYTHON" -m testharness "$@"
}

# GPUs this machine gives the scripts: $FUNCTIONAL_GPUS (run_all.sh --gpus N), else
# nvidia-smi's count, limited by CUDA_VISIBLE_DEVICES.
functional_gpus() {
    if [[ -n "${FUNCTIONAL_GPUS:-}" ]]; then
        echo "$FUNCTIONAL_GPUS"
        return
    fi
    local n=0 visible
    if command -v nvidia-smi >/dev/null 2>&1; then
        n=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
    fi
    if [[ -n "${CUDA_VISIBLE_DEVICES+x}" ]]; then
        if [[ -z "$CUDA_VISIBLE_DEVICES" || "$CUDA_VISIBLE_DEVICES" == "-1" ]]; then
            visible=0
        else
            visible=$(tr ',' '\n' <<<"$CUDA_VISIBLE_DEVICES" | grep -c .)
        fi
        (( visible < n )) && n=$visible
    fi
    echo "$n"
}

# The header comment of the script at $1 (its lines after the shebang up to the first
# line that is not a comment), without the leading '# '.
functional_usage() {
    sed -n '2,/^[^#]/p' "$1" | sed '/^[^#]/d; s/^# \{0,1\}//'
    echo
    echo "Options:"
    echo "  -h, --help   this help"
}

# -h/--help: usage, exit 0; another '-...' argument: one line, exit 2. $1 is the script.
functional_parse_args() {
    local script="$1" arg
    shift
    for arg in "$@"; do
        case "$arg" in
            -h | --help) functional_usage "$script"; exit 0 ;;
            -*) echo "error: unknown option '$arg'; arguments are key=value config overrides (see $(basename "$script") --help)" >&2
                exit 2 ;;
        esac
    done
}

# Check a config without training: the example's --check-config (a bad value or override:
# its one line on stderr, status 2). Missing test assets are built first, as for the run;
# its "config ok" line is dropped. With pipefail the status is the example's.
functional_check_config() {
    local example="$1"
    shift
    "$PYTHON" "$REPO_ROOT/$example" --check-config "$@" | { grep -v '^config ok: ' || true; }
}

# Set the experiment paths for the script at $1 (its name without .sh).
functional_init() {
    local script="$1"
    EXP_NAME="$(basename "$script" .sh)"
    if [[ -z "$EXP_NAME" || "$EXP_NAME" == "common" || "$EXP_NAME" == "run_all" ]]; then
        echo "error: '$script' is not a functional test script" >&2
        return 2
    fi
    EXP_DIR="$FUNCTIONAL_DIR/$EXP_NAME"
    REACH_DIR="$EXP_DIR/reach"
    LOG_DIR="$EXP_DIR/logs"
    CKPT_DIR="$EXP_DIR/checkpoints"
    RUN_LOG="$EXP_DIR/run.log"
    JSON_METRICS="$EXP_DIR/metrics.json"
    export EXP_NAME EXP_DIR REACH_DIR LOG_DIR CKPT_DIR RUN_LOG JSON_METRICS
}

# Build the unit-test assets when any of the given paths (relative to the repo) is missing.
# The builder is an input of the run's record either way: the assets are what it makes.
functional_require_assets() {
    local path
    FUNCTIONAL_INPUTS+=("$REPO_ROOT/tests/unit/prepare_unit_test_assets.py")
    for path in "$@"; do
        if [[ ! -e "$REPO_ROOT/$path" ]]; then
            echo "[functional] missing $path: building test assets"
            "$PYTHON" "$REPO_ROOT/tests/unit/prepare_unit_test_assets.py"
            return $?
        fi
    done
}

# Run a Python script under coverage when coverage is installed: measured into the run's own
# data file ($REACH_DIR/coverage, appended to tests/.coverage afterwards), through the probe
# that notes the repository files the script reads.
functional_python() {
    if ! "$PYTHON" -c "import coverage" >/dev/null 2>&1; then
        echo "[functional] warning: coverage is not installed; running without it (try: uv run --group test ...)"
        "$PYTHON" "$@"
        return
    fi
    local append=(-a)
    # A parallel-mode config (e.g. [tool.coverage.run] patch = ["subprocess"], which
    # measures Ray workers too) refuses -a: each process then writes its own file next
    # to the data file and functional_combine_coverage appends them afterwards.
    if "$PYTHON" -c "import coverage, sys; sys.exit(0 if coverage.Coverage().config.parallel else 1)" \
        >/dev/null 2>&1; then
        append=()
    fi
    TESTHARNESS_FUNCTIONAL_READS="$REACH_DIR/reads.txt" PYTHONPATH="$REPO_ROOT/tools/py${PYTHONPATH:+:$PYTHONPATH}" \
        "$PYTHON" -m coverage run "${append[@]}" --data-file="$REACH_DIR/coverage" \
        --source="$COVERAGE_SOURCE" -m testharness.functional.probe "$@"
}

# Fold the data files written by subprocesses (Ray workers, parallel mode) into the run's,
# then append the run's to tests/.coverage (the run's file stays: the reach is read from it).
functional_combine_coverage() {
    "$PYTHON" -c "import coverage" >/dev/null 2>&1 || return 0
    if compgen -G "$REACH_DIR/coverage.*" >/dev/null; then
        "$PYTHON" -m coverage combine --append --quiet --data-file="$REACH_DIR/coverage" "$REACH_DIR" || true
    fi
    if [[ -f "$REACH_DIR/coverage" ]]; then
        mkdir -p "$(dirname "$COVERAGE_DATA_FILE")"
        "$PYTHON" -m coverage combine --append --keep --quiet --data-file="$COVERAGE_DATA_FILE" \
            "$REACH_DIR/coverage" || true
    fi
}

# The files that define this script's shell functions (the script, common.sh, a script it
# sources): inputs of its record, besides what its driver read.
_functional_script_files() {
    local name file
    shopt -s extdebug
    while read -r _ _ name; do
        file="$(declare -F "$name" | cut -d' ' -f3-)"
        [[ "$file" == /* ]] || file="$FUNCTIONAL_STARTED_IN/$file"   # as it was sourced, before the cd
        echo "$file"
    done < <(declare -F) | sort -u
    shopt -u extdebug
}

# Record the run for run_all.sh --affected: $1 is the body's status (0: passed), the rest the
# user's overrides. A run with overrides is not the script's own run: nothing is recorded.
# Never changes the script's status.
_functional_record() {
    local rc="$1" gpus
    shift
    if (( $# )); then
        echo "[functional] reach not recorded: a run with config overrides is not the script's own"
        return 0
    fi
    gpus="$(functional_gpus)"
    if (( rc == 0 )); then
        local inputs=("${FUNCTIONAL_INPUTS[@]}")
        mapfile -t -O "${#inputs[@]}" inputs < <(_functional_script_files)
        functional_harness functional record "$EXP_NAME" "$REACH_DIR" --gpus "$gpus" --inputs "${inputs[@]}" \
            || echo "[functional] warning: the reach could not be recorded (see above)"
    else
        functional_harness functional record "$EXP_NAME" "$REACH_DIR" --gpus "$gpus" --failed \
            || echo "[functional] warning: the failure could not be recorded (see above)"
    fi
}

# Dump TensorBoard logs to $JSON_METRICS, then evaluate the checks given as arguments.
functional_check() {
    rm -f "$EXP_DIR/checks.json"  # a stale one must not be blamed for this run's failure
    "$PYTHON" "$REPO_ROOT/tests/json_dump_tb_logs.py" "$LOG_DIR" --output_path "$JSON_METRICS" || return $?
    "$PYTHON" "$REPO_ROOT/tests/check_metrics.py" "$JSON_METRICS" "$@" \
        --table-width "$TABLE_WIDTH" --json "$EXP_DIR/checks.json"
}

_functional_cleanup() {
    # Checkpoints are big and only exercise the save path: never leave them behind.
    if [[ -n "${CKPT_DIR:-}" && -d "$CKPT_DIR" ]]; then
        rm -rf "$CKPT_DIR"
    fi
}

_functional_body() {
    local start rc
    # This runs in the pipeline's subshell, where the caught stop signals are back at their
    # defaults: caught here too, a stop signal ends the body before anything is recorded,
    # whichever of it and the run's own exit status bash sees first.
    trap 'exit 130' INT
    trap 'exit 143' TERM
    echo "[functional] $EXP_NAME: $(date '+%Y-%m-%d %H:%M:%S'), repo $REPO_ROOT, python $(command -v "$PYTHON")"
    echo "[functional] overrides: ${*:-(none)}"
    start=$(date +%s)
    rc=0
    run_experiment "$@" || rc=$?
    functional_combine_coverage
    echo "[functional] run finished in $(( $(date +%s) - start ))s with exit status $rc"
    _functional_cleanup
    if (( rc != 0 )); then
        echo "[functional] $EXP_NAME: FAIL (the run itself failed; see $RUN_LOG)"
        # Stopped by a signal (Ctrl-C, SIGTERM): an interrupted run records nothing.
        (( rc == 130 || rc == 143 )) || _functional_record "$rc" "$@"
        return "$rc"
    fi
    rc=0
    check_experiment || rc=$?
    if (( rc == 0 )); then
        echo "[functional] $EXP_NAME: PASS"
    elif [[ -f "$EXP_DIR/checks.json" ]]; then
        echo "[functional] $EXP_NAME: FAIL (metric checks; see $EXP_DIR/checks.json)"
    else
        echo "[functional] $EXP_NAME: FAIL (the metrics could not be read or checked: see the error above)"
    fi
    _functional_record "$rc" "$@"
    return "$rc"
}

# Entry point of every functional script: functional_main "$@" at its end.
functional_main() {
    local script="${BASH_SOURCE[1]}"
    functional_parse_args "$script" "$@"
    functional_init "$script"
    if ! declare -F run_experiment >/dev/null || ! declare -F check_experiment >/dev/null; then
        echo "error: $script must define run_experiment and check_experiment" >&2
        return 2
    fi
    cd "$REPO_ROOT"
    if declare -F precheck_experiment >/dev/null; then
        local check_rc=0
        precheck_experiment "$@" || check_rc=$?
        if (( check_rc != 0 )); then
            return "$check_rc"
        fi
    fi
    rm -rf "$EXP_DIR"
    mkdir -p "$LOG_DIR" "$REACH_DIR"
    functional_harness functional begin "$REACH_DIR" || true   # the repository as the run starts
    # The table is printed through tee (not a terminal): size it for the real terminal.
    if [[ -z "${TABLE_WIDTH:-}" && -t 1 ]]; then
        TABLE_WIDTH="$(tput cols 2>/dev/null || echo 200)"
    fi
    export TABLE_WIDTH="${TABLE_WIDTH:-200}"
    trap _functional_cleanup EXIT
    trap 'exit 130' INT
    trap 'exit 143' TERM
    local rc=0
    # The body's output goes to the terminal and to run.log; its status survives the pipe.
    # With pipefail the pipeline's status is the body's unless tee itself fails.
    _functional_body "$@" 2>&1 | tee "$RUN_LOG" || rc=$?
    return "$rc"
}
