#!/usr/bin/env bash
# Run functional test scripts one after another, then print a summary table.
#
#   bash tests/functional/run_all.sh                   # every script this machine can run
#   bash tests/functional/run_all.sh sft grpo          # only these (name, name.sh or path)
#   bash tests/functional/run_all.sh sft -- policy.optimizer.lr=1e-3   # overrides for each
#   bash tests/functional/run_all.sh --list            # scripts and the GPUs they need
#
# Each script (every *.sh next to this one except common.sh) declares the GPUs it needs
# in a header line "# num-gpus: N"; N=0 means CPU-capable. Scripts needing more GPUs
# than are visible are reported as SKIP, a script without the header as ERROR.
# Exit status: 0 when every script that ran passed, 1 otherwise (or when none ran),
# 2 on a usage error (an unknown option, an unknown test, an argument after -- that is not
# a key=value override), before any test runs. Each script checks the overrides itself too.
set -uo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

usage() {
    sed -n '2,/^[^#]/p' "${BASH_SOURCE[0]}" | sed '/^[^#]/d; s/^# \{0,1\}//'
    cat <<'EOF'

Options:
  --gpus N   treat the machine as having N GPUs (default: detected with nvidia-smi,
             limited by CUDA_VISIBLE_DEVICES)
  --list     list the scripts and the GPUs each needs, run nothing
  -h, --help this help
EOF
}

detect_gpus() {
    local n=0
    if command -v nvidia-smi >/dev/null 2>&1; then
        n=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
    fi
    if [[ -n "${CUDA_VISIBLE_DEVICES+x}" ]]; then
        local visible
        if [[ -z "$CUDA_VISIBLE_DEVICES" || "$CUDA_VISIBLE_DEVICES" == "-1" ]]; then
            visible=0
        else
            visible=$(tr ',' '\n' <<<"$CUDA_VISIBLE_DEVICES" | grep -c .)
        fi
        (( visible < n )) && n=$visible
    fi
    echo "$n"
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
NAMES=()
PASSTHROUGH=()
while (( $# )); do
    case "$1" in
        -h | --help) usage; exit 0 ;;
        --list) LIST=1 ;;
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
[[ -n "$GPUS" ]] || GPUS=$(detect_gpus)

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

if (( LIST )); then
    printf '%-24s %s\n' "NAME" "GPUS"
    for s in "${SCRIPTS[@]}"; do
        need="$(required_gpus "$s")"
        printf '%-24s %s\n' "$(basename "$s" .sh)" "${need:-missing '# num-gpus: N' header}"
    done
    exit 0
fi

ROW_NAME=() ROW_STATUS=() ROW_TIME=() ROW_NOTE=()
ran=0 failed=0
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
    echo "=== [run_all] $name (needs $need GPU(s)) ==="
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

if (( ran == 0 )); then
    echo "error: no functional test ran (all skipped or invalid)" >&2
    exit 1
fi
(( failed == 0 )) && exit 0 || exit 1
