#!/usr/bin/env bash
# Run one functional test hermetically in Docker (image: bash docker/build.sh):
#   CONTAINER=<image> bash tests/run_functional_in_docker.sh functional/sft.sh [args]
# The path is relative to tests/ (tests/functional/sft.sh, or an absolute path inside this
# checkout, is accepted too); its outputs (logs, metrics JSON, the check table) land in this
# checkout as with a local run.
set -euo pipefail

USAGE='Usage: CONTAINER=<image> bash tests/run_functional_in_docker.sh functional/<test>.sh [args]
  e.g. CONTAINER=nemo-rl-test:latest bash tests/run_functional_in_docker.sh functional/sft.sh
  Build the image first: bash docker/build.sh   (docs/docker.md)'

if [[ $# -eq 0 || "${1:-}" == "-h" || "${1:-}" == "--help" ]]; then
  if [[ $# -eq 0 ]]; then printf '%s\n' "$USAGE" >&2; exit 2; fi
  printf '%s\n' "$USAGE"
  exit 0
fi

tests_dir="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
if [[ "$1" == /* ]]; then
  # An absolute path: only inside this checkout (the container sees nothing else), as the
  # path relative to its root.
  repo_root="$(cd "$tests_dir/.." && pwd -P)"
  script_dir="$(cd "${1%/*}/" 2>/dev/null && pwd -P)" || script_dir="${1%/*}"  # no such folder: as written
  if [[ "$script_dir/" != "$repo_root/"* ]]; then
    echo "error: $1 is not inside this checkout ($repo_root): the container sees only the checkout" >&2
    exit 2
  fi
  run_path="${script_dir#"$repo_root"}/${1##*/}"
  run_path="${run_path#/}"
else
  test_path="${1#./}"
  run_path="tests/${test_path#tests/}"
fi
shift
if [[ "$run_path" == *..* || ! -f "$tests_dir/../$run_path" ]]; then
  printf '%s\n' "$USAGE" >&2
  echo "error: no such test script: $run_path" >&2
  exit 2
fi

# shellcheck source=docker/run_lib.sh
source "$tests_dir/../docker/run_lib.sh"
nrl_docker_run "$USAGE" --prepare-assets bash "$run_path" "$@"
