#!/usr/bin/env bash
# Run functional test scripts one after another, then print a summary table.
#
#   bash tests/functional/run_all.sh                   # every script this machine can run
#   bash tests/functional/run_all.sh sft grpo          # only these (name, name.sh or path)
#   bash tests/functional/run_all.sh sft -- policy.optimizer.lr=1e-3   # overrides for each
#   bash tests/functional/run_all.sh --list            # scripts and the GPUs they need
#   bash tests/functional/run_all.sh --affected        # only the scripts an edit since their
#                                                      # last passing run can affect
#   bash tests/functional/run_all.sh --affected --since origin/main --list   # verdicts, run nothing
#   bash tests/functional/run_all.sh --affected --shard 2/3   # this runner's third of the work
#
# Each script (every *.sh next to this one except common.sh) declares the GPUs it needs
# in a header line "# num-gpus: N"; N=0 means CPU-capable. Scripts needing more GPUs
# than are visible are reported as SKIP, a script without the header as ERROR.
# Exit status: 0 when every script that ran passed, 1 otherwise (or when none ran, unless
# --affected found nothing to run), 2 on a usage error (an unknown option, an unknown test,
# an argument after -- that is not a key=value override, a --since that names no commit),
# before any test runs. Each script checks the overrides itself too.
#
# --affected reads what each script's last passing run reached (recorded by every passing
# run without overrides; docs/functional-tests.md): a script runs when an edit touches a
# function it ran, import-time code it executed or a file it read, when it never passed or
# failed last, and every script runs when the environment (uv.lock, ...) or the functional
# harness changed or a file no recorded run read did. Each verdict is printed with its reason.
set -uo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$HERE/common.sh"   # PYTHON, functional_harness, functional_gpus
set +e                     # common.sh sets -e for the scripts; a failing script must not end this loop

usage() {
    sed -n '2,/^[^#]/p' "${BASH_SOURCE[0]}" | sed '/^[^#]/d; s/^# \{0,1\}//'
    cat <<'EOF'

Options:
  --gpus N      treat the machine as having N GPUs (default: detected with nvidia-smi,
                limited by CUDA_VISIBLE_DEVICES)
  --list        list the scripts and the GPUs each needs (with --affected: and whether
                each runs, and why), run nothing
  --affected    run only the scripts an edit can affect, judged since each one's last
                passing run; the others are listed as SKIP with the reason
  --since REF   with --affected: judge the edit since the git revision REF instead
  --shard I/N   run only shard I of N of the scripts that would run (after --affected),
                balanced by the durations their last passing runs recorded
  -h, --help    this help
EOF
}

# The "# num-gpus: N" header of a script (empty when it has none).
required_gpus() {
    sed -n 's/^#[[:space:]]*num-gpus:[[:space:]]*\([0-9][0-9]*\)[[:space:]]*$/\1/p' "$1" | head -n 1
}

all_scripts() {
    local f
    for f in "$HERE"/*.sh; do
        [[ -e "$f" ]] || continue
        case "$(basename "$f")" in common.sh | run_all.sh) continue ;; esac
        echo "$f"
    done
}

resolve() {
    local name="$1" f
    case "$(basename "$name" .sh)" in common | run_all) return 1 ;; esac
    for f in "$name" "$HERE/$name" "$HERE/$name.sh"; do
        if [[ -f "$f" && "$f" == *.sh ]]; then
            echo "$(cd "$(dirname "$f")" && pwd)/$(basename "$f")"
            return 0
        fi
    done
    return 1
}

format_time() {
    local ms=$1
    if (( ms >= 60000 )); then
        printf '%dm%02ds' $(( ms / 60000 )) $(( (ms % 60000) / 1000 ))
    else
        printf '%d.%ds' $(( ms / 1000 )) $(( (ms % 1000) / 100 ))
    fi
}

now_ms() { date +%s%3N; }

GPUS=""
LIST=0
AFFECTED=0
SINCE=""
SHARD=""
NAMES=()
PASSTHROUGH=()
while (( $# )); do
    case "$1" in
        -h | --help) usage; exit 0 ;;
        --list) LIST=1 ;;
        --affected) AFFECTED=1 ;;
        --since)
            if [[ $# -lt 2 || -z "$2" || "$2" == -* ]]; then
                echo "error: --since needs a git revision, e.g. --since origin/main" >&2; exit 2
            fi
            SINCE="$2"; shift ;;
        --shard)
            [[ $# -ge 2 ]] || { echo "error: --shard needs I/N, e.g. --shard 1/3" >&2; exit 2; }
            SHARD="$2"; shift ;;
        --shard=*) SHARD="${1#*=}" ;;
        --since=*)
            SINCE="${1#*=}"
            [[ -n "$SINCE" ]] || { echo "error: --since needs a git revision, e.g. --since origin/main" >&2; exit 2; }
            ;;
        --gpus)
            if [[ $# -lt 2 || ! "$2" =~ ^[0-9]+$ ]]; then
                echo "error: --gpus needs a number, e.g. --gpus 0" >&2; exit 2
            fi
            GPUS="$2"; shift ;;
        --gpus=*)
            GPUS="${1#*=}"
            [[ "$GPUS" =~ ^[0-9]+$ ]] || { echo "error: --gpus needs a number, got '$GPUS'" >&2; exit 2; }
            ;;
        --)
            shift
            for arg in "$@"; do   # overrides for every script: key=value, never a flag
                if [[ "$arg" == -* || "$arg" != ?*=* ]]; then
                    echo "error: '$arg' after -- is not a key=value config override" >&2; exit 2
                fi
            done
            PASSTHROUGH=("$@"); break ;;
        -*) echo "error: unknown option '$1' (see --help)" >&2; exit 2 ;;
        *) NAMES+=("$1") ;;
    esac
    shift
done
if [[ -n "$SINCE" ]] && (( ! AFFECTED )); then
    echo "error: --since REF goes with --affected (run_all.sh --affected --since REF)" >&2; exit 2
fi
[[ -n "$GPUS" ]] || GPUS=$(functional_gpus)
export FUNCTIONAL_GPUS="$GPUS"   # the scripts record their reach with the same count

SCRIPTS=()
if (( ${#NAMES[@]} )); then
    for name in "${NAMES[@]}"; do
        if ! path=$(resolve "$name"); then
            echo "error: no functional test '$name' (available: $(all_scripts | xargs -n1 basename | sed 's/\.sh$//' | tr '\n' ' '))" >&2
            exit 2
        fi
        SCRIPTS+=("$path")
    done
else
    mapfile -t SCRIPTS < <(all_scripts)
fi
if (( ${#SCRIPTS[@]} == 0 )); then
    echo "error: no functional test scripts in $HERE" >&2
    exit 1
fi

# --affected, --shard: one verdict per script this machine can run (runs | skipped) and its
# reason, from the reach file. The others stay ERROR / SKIP below, whatever the selection.
declare -A VERDICT=() REASON=()
SELECTING=0
[[ -n "$SHARD" ]] || (( AFFECTED )) && SELECTING=1
if (( SELECTING )); then
    plan_args=(--gpus "$GPUS")
    (( AFFECTED )) && plan_args+=(--affected)
    [[ -n "$SINCE" ]] && plan_args+=(--since "$SINCE")
    [[ -n "$SHARD" ]] && plan_args+=(--shard "$SHARD")
    runnable=()
    for s in "${SCRIPTS[@]}"; do
        need="$(required_gpus "$s")"
        [[ -n "$need" ]] && (( need <= GPUS )) && runnable+=("$s")
    done
    if (( ${#runnable[@]} )); then
        verdicts="$(cd "$REPO_ROOT" && functional_harness functional plan "${plan_args[@]}" "${runnable[@]}")" || exit $?
        while IFS=$'\t' read -r name verdict reason; do
            VERDICT[$name]="$verdict" REASON[$name]="$reason"
        done <<<"$verdicts"
    fi
fi

if (( LIST )); then
    if (( SELECTING )); then
        printf '%-24s %-5s %s\n' "NAME" "GPUS" "VERDICT"
    else
        printf '%-24s %s\n' "NAME" "GPUS"
    fi
    for s in "${SCRIPTS[@]}"; do
        name="$(basename "$s" .sh)"
        need="$(required_gpus "$s")"
        if (( SELECTING )); then
            if [[ -z "$need" ]]; then
                verdict="error: no '# num-gpus: N' header line"
            elif (( need > GPUS )); then
                verdict="SKIP: needs $need GPU(s), $GPUS available"
            else
                verdict="${VERDICT[$name]}: ${REASON[$name]}"
            fi
            printf '%-24s %-5s %s\n' "$name" "${need:-?}" "$verdict"
        else
            printf '%-24s %s\n' "$name" "${need:-missing '# num-gpus: N' header}"
        fi
    done
    exit 0
fi

ROW_NAME=() ROW_STATUS=() ROW_TIME=() ROW_NOTE=()
ran=0 failed=0 unaffected=0
for s in "${SCRIPTS[@]}"; do
    name="$(basename "$s" .sh)"
    need="$(required_gpus "$s")"
    if [[ -z "$need" ]]; then
        ROW_NAME+=("$name") ROW_STATUS+=("ERROR") ROW_TIME+=("-")
        ROW_NOTE+=("no '# num-gpus: N' header line"); failed=$((failed + 1))
        continue
    fi
    if (( need > GPUS )); then
        ROW_NAME+=("$name") ROW_STATUS+=("SKIP") ROW_TIME+=("-")
        ROW_NOTE+=("needs $need GPU(s), $GPUS available")
        continue
    fi
    if (( SELECTING )) && [[ "${VERDICT[$name]}" != "runs" ]]; then
        ROW_NAME+=("$name") ROW_STATUS+=("SKIP") ROW_TIME+=("-")
        ROW_NOTE+=("not selected: ${REASON[$name]}"); unaffected=$((unaffected + 1))
        continue
    fi
    if (( SELECTING )); then
        echo "=== [run_all] $name (needs $need GPU(s); runs: ${REASON[$name]}) ==="
    else
        echo "=== [run_all] $name (needs $need GPU(s)) ==="
    fi
    start=$(now_ms)
    bash "$s" "${PASSTHROUGH[@]}"
    rc=$?
    elapsed=$(( $(now_ms) - start ))
    ran=$((ran + 1))
    ROW_NAME+=("$name") ROW_TIME+=("$(format_time "$elapsed")")
    if (( rc == 0 )); then
        ROW_STATUS+=("PASS") ROW_NOTE+=("")
    else
        ROW_STATUS+=("FAIL") ROW_NOTE+=("exit status $rc"); failed=$((failed + 1))
    fi
done

echo
echo "Functional tests ($GPUS GPU(s) visible)"
fmt='%-24s %-6s %10s  %s\n'
printf "$fmt" "NAME" "STATUS" "WALL TIME" "NOTE"
for i in "${!ROW_NAME[@]}"; do
    printf "$fmt" "${ROW_NAME[$i]}" "${ROW_STATUS[$i]}" "${ROW_TIME[$i]}" "${ROW_NOTE[$i]}"
done

if [[ -n "${GITHUB_STEP_SUMMARY:-}" ]]; then   # GitHub Actions: the table and each script's checks
    for i in "${!ROW_NAME[@]}"; do
        printf '%s\t%s\t%s\t%s\n' "${ROW_NAME[$i]}" "${ROW_STATUS[$i]}" "${ROW_TIME[$i]}" "${ROW_NOTE[$i]}"
    done | functional_harness functional summary "$HERE" --gpus "$GPUS" \
        || echo "warning: could not append to \$GITHUB_STEP_SUMMARY" >&2
fi

if (( ran == 0 )); then
    if (( SELECTING && unaffected > 0 && failed == 0 )); then
        echo "nothing to run: no script this machine can run is selected${SINCE:+ (affected since $SINCE)}${SHARD:+ for shard $SHARD}"
        exit 0
    fi
    echo "error: no functional test ran (all skipped or invalid)" >&2
    exit 1
fi
(( failed == 0 )) && exit 0 || exit 1
