#!/usr/bin/env bash
# CI: the suites on the Pythons of Debian 12 (3.11.2) and Debian 13 (3.13), in the images
# `docker/build.sh` makes from Debian's own packages (docs/test-suites.md).
#   bash .ci/python_matrix.sh build   # both images; mostly downloads: CI runs it in the background
#   bash .ci/python_matrix.sh test    # the harness and repository suites in each image
# The library suite on 3.11.2 runs in .ci/docker_e2e.sh, in the same bookworm image.
# Needs a running Docker daemon (.ci/run starts one), root, debootstrap.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
export CI="${CI:-true}"

# image tag, docker/build.sh's --python
IMAGES=("nemo-rl-test:ci 3.11" "nemo-rl-test:ci-py3.13 3.13")

build() {
  local entry tag python t0
  for entry in "${IMAGES[@]}"; do
    read -r tag python <<<"$entry"
    t0=$SECONDS
    echo "== python matrix: build $tag (Python $python)"
    bash docker/build.sh --tag "$tag" --python "$python"
    echo "== python matrix: $tag built in $((SECONDS - t0)) s"
  done
}

test_suites() {
  local entry tag python t0
  for entry in "${IMAGES[@]}"; do
    read -r tag python <<<"$entry"
    t0=$SECONDS
    echo "== python matrix: the harness and repository suites on $tag"
    # One container for both suites: its python3 is Debian's own (printed first).
    CONTAINER="$tag" bash docker/run.sh bash -c \
      'python -VV && python -m pytest -q -n 2 tools/py/tests && python -m pytest -q tests/repo'
    echo "== python matrix: $tag passed in $((SECONDS - t0)) s"
  done
}

case "${1:-}" in
  build) build ;;
  test) test_suites ;;
  *) echo "usage: bash .ci/python_matrix.sh build|test" >&2; exit 2 ;;
esac
