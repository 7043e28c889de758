#!/usr/bin/env bash
# Any command hermetically in Docker (image: bash docker/build.sh), from the repository mount:
#   CONTAINER=<image> bash docker/run.sh CMD [ARGS...]
#   e.g. CONTAINER=nemo-rl-test:py3.13 bash docker/run.sh pytest -n 2 tools/py/tests
# The same container set-up as tests/run_unit_in_docker.sh (docker/run_lib.sh); CMD's exit
# status is this script's. For the unit and functional tests use those two scripts.
set -euo pipefail

USAGE='Usage: CONTAINER=<image> bash docker/run.sh CMD [ARGS...]
  e.g. CONTAINER=nemo-rl-test:py3.13 bash docker/run.sh pytest -n 2 tools/py/tests
  Build the image first: bash docker/build.sh [--python 3.13]   (docs/docker.md)'

if [[ $# -eq 0 || "${1:-}" == "-h" || "${1:-}" == "--help" ]]; then
  if [[ $# -eq 0 ]]; then printf '%s\n' "$USAGE" >&2; exit 2; fi
  printf '%s\n' "$USAGE"
  exit 0
fi

# shellcheck source=docker/run_lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/run_lib.sh"
nrl_docker_run "$USAGE" "$@"
