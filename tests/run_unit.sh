#!/usr/bin/env bash
# Unit tests: bash tests/run_unit.sh [--hf-gated] [--mcore-only | --vllm-only | ...] [--rerun-failures N]
#                                    [--shard I/N] [--shard-plan] [pytest args | paths]
# (the marker-group flags come from [tool.testharness.marker_groups] in pyproject.toml)
# Run it as: uv run --group test bash tests/run_unit.sh   (see --help)
# The logic (flags, Ray/GPU discovery, assets, exit codes) is testharness.unit_runner.
set -euo pipefail

# The checkout this script is in, also when it is reached through a symlink (of the file, or of
# a folder above it): readlink without -f, cd -P, so it is the same on Linux and macOS.
SCRIPT="${BASH_SOURCE[0]}"
while [[ -L "$SCRIPT" ]]; do
    LINK="$(readlink "$SCRIPT")"
    [[ "$LINK" == /* ]] && SCRIPT="$LINK" || SCRIPT="$(dirname "$SCRIPT")/$LINK"
done
REPO_ROOT="$(cd -P "$(dirname "$SCRIPT")" && cd .. && pwd)"
PYTHON="${PYTHON:-python}"

wants_help=0
for arg in "$@"; do [[ "$arg" == "-h" || "$arg" == "--help" ]] && wants_help=1; done
command -v "$PYTHON" >/dev/null 2>&1 || PYTHON=python3   # outside a venv there may be no `python`

# find_spec, not import: importing Ray takes seconds. --help needs neither.
if (( ! wants_help )) && ! "$PYTHON" -c 'import importlib.util as u, sys; sys.exit(not (u.find_spec("pytest") and u.find_spec("ray")))' >/dev/null 2>&1; then
    echo "run_unit: pytest and ray must be importable by '$PYTHON';" \
         "run it as: uv run --group test bash tests/run_unit.sh" >&2
    exit 2
fi
# Without uv the harness may not be installed: use it from the checkout.
if ! "$PYTHON" -c 'import importlib.util as u, sys; sys.exit(not u.find_spec("testharness"))' >/dev/null 2>&1; then
    export PYTHONPATH="$REPO_ROOT/tools/py${PYTHONPATH:+:$PYTHONPATH}"
fi
export TESTHARNESS_ROOT="${TESTHARNESS_ROOT:-$REPO_ROOT}"
# --cov data goes where upstream's run_unit.sh (which cds into tests/) leaves it and its CI
# collects it, from any directory: tests/.coverage, beside the functional scripts' data; and
# the project's coverage settings apply from any directory (coverage looks only in the current
# one), so Ray workers are measured too (nemo_rl/utils/child_coverage.py).
export COVERAGE_FILE="${COVERAGE_FILE:-$REPO_ROOT/tests/.coverage}"
if [[ -f "$REPO_ROOT/pyproject.toml" ]]; then
    export COVERAGE_RCFILE="${COVERAGE_RCFILE:-$REPO_ROOT/pyproject.toml}"
fi
export TESTHARNESS_PROG="bash tests/run_unit.sh"   # how --help names this script
exec "$PYTHON" -m testharness.unit_runner "$@"
