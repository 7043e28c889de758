#!/usr/bin/env bash
# Run the unit tests hermetically in Docker (image: bash docker/build.sh):
#   CONTAINER=<image> bash tests/run_unit_in_docker.sh [run_unit.sh args]
# Builds the test assets in the container if they are missing, then runs
# `bash tests/run_unit.sh ARGS` there; tests/unit/unit_results.json lands in this checkout.
set -euo pipefail

USAGE='Usage: CONTAINER=<image> bash tests/run_unit_in_docker.sh [run_unit.sh args]
  e.g. CONTAINER=nemo-rl-test:latest bash tests/run_unit_in_docker.sh -k tracker
  Build the image first: bash docker/build.sh   (docs/docker.md)
  Every argument goes to tests/run_unit.sh (see: bash tests/run_unit.sh --help).'

if [[ "${1:-}" == "-h" || "${1:-}" == "--help" ]] && [[ -z "${CONTAINER:-}" ]]; then
  printf '%s\n' "$USAGE"
  exit 0
fi

# shellcheck source=docker/run_lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../docker/run_lib.sh"
nrl_docker_run "$USAGE" --prepare-assets bash tests/run_unit.sh "$@"
