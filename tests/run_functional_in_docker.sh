#!/usr/bin/env bash
# Run one functional test hermetically in Docker (image: bash docker/build.sh):
#   CONTAINER=<image> bash tests/run_functional_in_docker.sh functional/sft.sh [args]
# The path is relative to tests/ (tests/functional/sft.sh is accepted too); its outputs
# (logs, metrics JSON, the check table) land in this checkout as with a local run.
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
test_path="${1#./}"
test_path="${test_path#tests/}"
shift
if [[ "$test_path" == /* || "$test_path" == *..* || ! -f "$tests_dir/$test_path" ]]; then
  printf '%s\n' "$USAGE" >&2
  echo "error: no such test script: tests/$test_path" >&2
  exit 2
fi

# shellcheck source=docker/run_lib.sh
source "$tests_dir/../docker/run_lib.sh"
nrl_docker_run "$USAGE" --prepare-assets bash "tests/$test_path" "$@"
