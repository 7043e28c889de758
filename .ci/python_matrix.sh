#!/usr/bin/env bash
# CI: the suites on the Pythons of Debian 12 (3.11.2) and Debian 13 (3.13), in the images
# `docker/build.sh` makes from Debian's own packages (docs/test-suites.md). The Debian 12 image
# has the low ends of the Ray and pytest-xdist ranges the harness declares (tools/py/pyproject.toml,
# its `ray` and `xdist` extras) in place of the locked ones, which the host and the Debian 13
# image run: the harness suite is tested at both ends.
#   bash .ci/python_matrix.sh build   # both images; mostly downloads: CI runs it in the background
#   bash .ci/python_matrix.sh test    # the harness and repository suites in each image
# The library suite on 3.11.2 runs in .ci/docker_e2e.sh, in nemo-rl-test:ci: the same bookworm
# layers with the locked Ray (built there in seconds from the layers cached here).
# Needs a running Docker daemon (.ci/run starts one), root, debootstrap.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
export CI="${CI:-true}"
source .ci/cpu.sh
# "N s, M CPU-s in Docker" since `since WALL DOCKER` (the suites' and builds' own CPU, whatever
# runs beside them on the host).
since() {
  local now
  now=$(docker_cpu_s)
  if [[ -n $now && -n $2 ]]; then echo "$((SECONDS - $1)) s, $((now - $2)) CPU-s in Docker"; else echo "$((SECONDS - $1)) s"; fi
}

# The low end of the harness's Ray range: `ray = ["ray>=LOW,<HIGH"]` in tools/py/pyproject.toml.
RAY_LOW="$(sed -n 's/^ray = \["ray>=\([0-9.]*\),.*/\1/p' tools/py/pyproject.toml)"
[[ -n "$RAY_LOW" ]] || { echo "python matrix: no ray = [\"ray>=LOW,...\"] in tools/py/pyproject.toml" >&2; exit 2; }
XDIST_LOW="$(sed -n 's/^xdist = \["pytest-xdist>=\([0-9.]*\),.*/\1/p' tools/py/pyproject.toml)"
[[ -n "$XDIST_LOW" ]] || { echo "python matrix: no xdist = [\"pytest-xdist>=LOW,...\"] in tools/py/pyproject.toml" >&2; exit 2; }

# image tag, docker/build.sh's --python, its --ray and --xdist ("-": the locked ones)
IMAGES=("nemo-rl-test:ci-ray$RAY_LOW-xdist$XDIST_LOW 3.11 $RAY_LOW $XDIST_LOW" "nemo-rl-test:ci-py3.13 3.13 - -")

build() {
  local entry tag python ray xdist t0 d0
  for entry in "${IMAGES[@]}"; do
    read -r tag python ray xdist <<<"$entry"
    t0=$SECONDS d0=$(docker_cpu_s)
    echo "== python matrix: build $tag (Python $python, Ray ${ray/#-/locked}, pytest-xdist ${xdist/#-/locked})"
    local pins=()
    [[ $ray == - ]] || pins+=(--ray "$ray")
    [[ $xdist == - ]] || pins+=(--xdist "$xdist")
    bash docker/build.sh --tag "$tag" --python "$python" "${pins[@]}"
    echo "== python matrix: $tag built in $(since "$t0" "$d0")"
  done
}

test_suites() {
  local entry tag python ray xdist t0 d0
  for entry in "${IMAGES[@]}"; do
    read -r tag python ray xdist <<<"$entry"
    t0=$SECONDS d0=$(docker_cpu_s)
    echo "== python matrix: the harness and repository suites on $tag (Python $python, Ray ${ray/#-/locked}, pytest-xdist ${xdist/#-/locked})"
    # One container for both suites: its python3 is Debian's own, and its Ray and xdist (printed first).
    CONTAINER="$tag" bash docker/run.sh bash -c \
      'python -VV && python -c "import ray, xdist; print(\"Ray\", ray.__version__, \"pytest-xdist\", xdist.__version__)" && python -m pytest -q -n 2 tools/py/tests && python -m pytest -q tests/repo'
    echo "== python matrix: $tag passed in $(since "$t0" "$d0")"
  done
}

case "${1:-}" in
  build) build ;;
  test) test_suites ;;
  *) echo "usage: bash .ci/python_matrix.sh build|test" >&2; exit 2 ;;
esac
