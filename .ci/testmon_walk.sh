#!/usr/bin/env bash
# The README's `pytest --testmon` workflow on the real library, walked as a new user would,
# in a copy of the checkout (it edits a file there):
#   seed -> no change runs nothing (and starts no Ray cluster) -> a same-behaviour edit to a
#   function that runs only inside the policy worker actor runs exactly the tests whose
#   actors ran it -> again: nothing -> break it: they fail -> again: they fail again ->
#   restore it: they pass -> again: nothing.
# Which tests ran, and how, is read from the tracker's tests/unit/unit_results.json.
#   bash .ci/testmon_walk.sh      (after `uv sync --group test` and the test assets)
#   PYTEST_CMD="python3 -m pytest" bash .ci/testmon_walk.sh     (a machine without uv)
# WALK_TESTS: the test paths (default tests/unit); WALK_LOGS: where each step's output goes;
# WALK_PARALLEL_ARGS: more arguments for the seed, the broken and the fixed step (e.g. "-n 2",
# faster); the serial steps between read the state those runs recorded, and the reverse.
# WALK_SEEDED=1: the checkout was just seeded (`bash tests/run_unit.sh --testmon ...` over
# WALK_TESTS, as CI's unit step does): the walk takes its testmon and remote-selection state
# and its results instead of seeding again, and starts at the no-change step. Give it the
# seed's environment: PYTEST_CMD="$PWD/.venv/bin/python -m pytest".
set -euo pipefail
read -r -a PYTEST <<<"${PYTEST_CMD:-uv run --group test pytest}"
read -r -a TESTS <<<"${WALK_TESTS:-tests/unit}"
read -r -a PARALLEL <<<"${WALK_PARALLEL_ARGS:-}"
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
WORK=$(mktemp -d /tmp/testmon_walk.XXXXXX)
RAYDIRS=$(mktemp -d /tmp/twray.XXXX)  # short: Ray's socket paths must stay under ~107 characters
trap 'rm -rf "$WORK" "$RAYDIRS"' EXIT

# The function edited, and the tests that run it inside a policy worker on a CPU machine.
TARGET=nemo_rl/models/policy/workers/dtensor_policy_worker.py
FUNCTION="    def generate("
EXPECTED="tests/unit/algorithms/test_eval.py::test_eval_scores_the_base_model_and_each_checkpoint
tests/unit/algorithms/test_grpo.py::test_one_grpo_step_through_ray
tests/unit/models/policy/test_dtensor_worker.py::test_generation_is_seeded"
# Also run, and pass, whenever the file changes: they start processes the selection cannot see
# into (fresh interpreters that import every library module; an inner pytest of a copy of
# tests/unit/conftest.py), so the remote-aware selection's static closure of these tests holds
# every module of nemo_rl.
CHANGED_FILE_ALSO="tests/unit/test_import_side_effects.py::test_importing_every_module_leaves_the_environment_unchanged[plain]
tests/unit/test_import_side_effects.py::test_importing_every_module_leaves_the_environment_unchanged[under-coverage]
tests/unit/test_ray_autouse_rule.py::test_a_fixture_of_a_sub_folders_conftest_that_uses_ray_gets_the_sessions_cluster"

# Tracked and untracked (not ignored) files; the test assets are git-ignored: linked.
if git -C "$ROOT" rev-parse --git-dir >/dev/null 2>&1; then
  git -C "$ROOT" ls-files -z -co --exclude-standard | (cd "$ROOT" && tar --null -T - -cf -) | tar -xf - -C "$WORK"
else  # a copy of a working tree without its .git
  tar -C "$ROOT" --exclude=./.venv --exclude=./.whl --exclude=./tests/unit/test_assets --exclude='.testmondata*' \
    --exclude=./.nrl_remote_map.json --exclude=./.nrl_remote_state.json -cf - . | tar -xf - -C "$WORK"
fi
ln -s "$ROOT/tests/unit/test_assets" "$WORK/tests/unit/test_assets"
SEEDED=${WALK_SEEDED:-0}
if [[ $SEEDED == 1 ]]; then  # the state a seed leaves: testmon's database, the remote map and state
  for f in .testmondata .nrl_remote_map.json .nrl_remote_state.json tests/unit/unit_results.json; do
    [[ -f "$ROOT/$f" ]] || { echo "testmon walk: FAIL: WALK_SEEDED=1 but $ROOT/$f is missing" >&2; exit 1; }
    cp "$ROOT/$f"* "$WORK/$(dirname "$f")/"  # with SQLite's -wal/-shm files when there are any
  done
fi
cd "$WORK"
LOGS=${WALK_LOGS:-$WORK}
mkdir -p "$LOGS"
export PYTHONPATH="$WORK:$WORK/tools/py${PYTHONPATH:+:$PYTHONPATH}"  # this copy's code, whatever the path says
ORIG="$WORK/.walk_original"  # not a .py file: neither selector sees it
cp "$TARGET" "$ORIG"

fail() { echo "testmon walk: FAIL: $*" >&2; exit 1; }

# walk STEP EXPECTED_RC OUTCOME [ARGS]: the README command, then checks. OUTCOME: none (nothing
# ran), all (the seed), passed or failed (exactly the EXPECTED tests ran, with that outcome, and
# with FILE_CHANGED=1 the CHANGED_FILE_ALSO tests too, passed).
walk() {
  local step=$1 want_rc=$2 want_outcome=$3 rc=0
  local args=("${@:4}")
  export RAY_TMPDIR="$RAYDIRS/$step"  # fresh: a Ray session directory there means a cluster started
  mkdir -p "$RAY_TMPDIR"
  local t0=$SECONDS
  "${PYTEST[@]}" --testmon "${args[@]}" "${TESTS[@]}" >"$LOGS/$step.log" 2>&1 || rc=$?
  local ran
  ran=$(jq -r '.tests | to_entries[] | "\(.key) \(.value.outcome)"' tests/unit/unit_results.json | sort)
  printf '%-22s rc=%s  %3s s  %s test(s) ran  | %s\n' "$step" "$rc" $((SECONDS - t0)) \
    "$(grep -c . <<<"$ran" || true)" "$(grep -m1 '^remote-select:' "$LOGS/$step.log" || true)"
  [[ $rc == "$want_rc" ]] || { tail -30 "$LOGS/$step.log"; fail "$step: exit $rc, expected $want_rc"; }
  if [[ $want_outcome == none ]]; then
    [[ -z $ran ]] || fail "$step: expected no test to run, ran: $ran"
    [[ -z $(find "$RAY_TMPDIR" -maxdepth 2 -name 'session_*' -print -quit) ]] || fail "$step: a Ray cluster started"
  elif [[ $want_outcome == all ]]; then  # the seed: everything ran, the edited tests among them
    while read -r t; do
      grep -qxF "$t passed" <<<"$ran" || fail "$step: $t did not run and pass"
    done <<<"$EXPECTED"
  else
    local want
    want=$(sed "s/\$/ $want_outcome/" <<<"$EXPECTED")
    [[ ${FILE_CHANGED:-0} == 1 ]] && want+=$'\n'$(sed 's/$/ passed/' <<<"$CHANGED_FILE_ALSO")
    want=$(sort <<<"$want")
    [[ $ran == "$want" ]] || fail "$step: ran"$'\n'"$ran"$'\n'"expected"$'\n'"$want"
  fi
}

# Insert LINE as the first statement of FUNCTION's body (after its one-line docstring).
edit() {
  local at
  at=$(grep -n -F -m1 "$FUNCTION" "$TARGET" | cut -d: -f1)
  [[ -n $at ]] || fail "no '$FUNCTION' in $TARGET"
  sed -n "$((at + 1))p" "$TARGET" | grep -q '"""' || fail "$TARGET: the docstring moved; update this script"
  cp "$ORIG" "$TARGET"
  sed -i "$((at + 1))a\\$1" "$TARGET"
}

echo "testmon walk in $WORK (edits $TARGET: generate)"
if [[ $SEEDED == 1 ]]; then
  check_seed() {  # the unit step's record: everything ran, the edited tests among them
    local ran
    ran=$(jq -r '.tests | to_entries[] | "\(.key) \(.value.outcome)"' tests/unit/unit_results.json | sort)
    while read -r t; do
      grep -qxF "$t passed" <<<"$ran" || fail "seed (the unit step): $t did not run and pass"
    done <<<"$EXPECTED"
    printf '%-22s taken from the unit step: %s test(s) ran\n' seed "$(grep -c . <<<"$ran")"
  }
  check_seed
else
  walk seed 0 all "${PARALLEL[@]}"
fi
walk no-change 0 none  # testmon exits 0 when it deselected everything
edit "        cfg = dict(cfg)  # a copy: same behaviour"
FILE_CHANGED=1 walk same-behaviour-edit 0 passed
walk again 0 none
edit "        raise RuntimeError('broken on purpose by .ci/testmon_walk.sh')"
FILE_CHANGED=1 walk broken 1 failed "${PARALLEL[@]}"
walk still-broken 1 failed
cp "$ORIG" "$TARGET"
FILE_CHANGED=1 walk fixed 0 passed "${PARALLEL[@]}"
walk after-fix 0 none
echo "testmon walk: OK"
