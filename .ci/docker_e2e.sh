#!/usr/bin/env bash
# CI: the hermetic Docker path end to end, as a user runs it (docs/docker.md).
#   bash .ci/docker_e2e.sh
# 1. start dockerd if it is not running   2. bash docker/build.sh
# 3. a small unit selection in the container: unit_results.json must land here, passing
# 4. the same as a non-root user on a copy: every file it makes must be that user's
# 5. the functional SFT test in the container: exit 0 and checks.json all PASS
# Needs root (dockerd, debootstrap) and the apt packages docker.io and debootstrap.
# Knobs: DOCKER_E2E_TAG (default nemo-rl-test:ci), DOCKER_E2E_UNIT_ARGS (space-separated).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
TAG="${DOCKER_E2E_TAG:-nemo-rl-test:ci}"
if [[ -n "${DOCKER_E2E_UNIT_ARGS:-}" ]]; then
  read -r -a UNIT_ARGS <<< "$DOCKER_E2E_UNIT_ARGS"
else
  # Small but real: config parsing, and a two-actor Ray worker group doing a gloo all-reduce.
  UNIT_ARGS=(tests/unit/test_config.py tests/unit/distributed/test_worker_group.py -k "config or all_reduce")
fi
export CI="${CI:-true}"   # never -it here

T0=$(date +%s)
declare -a TIMES=()
lap() { TIMES+=("$(printf '%-28s %5ss' "$1" "$(( $(date +%s) - LAP ))")"); LAP=$(date +%s); }
fail() { echo "docker e2e: FAIL: $*" >&2; exit 1; }
LAP=$T0
WORK="$(mktemp -d /tmp/nrl-docker-e2e.XXXXXX)"
DOCKERD_PID=""
cleanup() {
  rm -rf "$WORK"
  # A daemon this script started is stopped again (its images stay on disk for the next run).
  if [[ -n "$DOCKERD_PID" ]]; then
    kill "$DOCKERD_PID" 2>/dev/null || true
    for _ in $(seq 1 30); do kill -0 "$DOCKERD_PID" 2>/dev/null || break; sleep 1; done
  fi
}
trap cleanup EXIT
chmod 0755 "$WORK"   # the non-root step below must reach its copy inside
MARK="$WORK/start"
touch "$MARK"

echo "== docker e2e: daemon"
if ! docker info >/dev/null 2>&1; then
  command -v dockerd >/dev/null 2>&1 || fail "dockerd not found (apt-get install -y docker.io)"
  echo "starting dockerd (log: /tmp/dockerd-ci.log)"
  nohup dockerd >/tmp/dockerd-ci.log 2>&1 &
  DOCKERD_PID=$!
  for _ in $(seq 1 60); do docker info >/dev/null 2>&1 && break; sleep 1; done
  docker info >/dev/null 2>&1 || { tail -20 /tmp/dockerd-ci.log >&2; fail "dockerd did not come up"; }
fi
lap "dockerd"

echo "== docker e2e: build $TAG"
bash docker/build.sh --tag "$TAG"
lap "build (cold or warm)"

echo "== docker e2e: unit selection: ${UNIT_ARGS[*]}"
CONTAINER="$TAG" bash tests/run_unit_in_docker.sh "${UNIT_ARGS[@]}" || fail "unit tests in Docker exited $?"
results=tests/unit/unit_results.json
[[ -f "$results" && "$results" -nt "$MARK" ]] || fail "$results was not written by this run"
python3 - "$results" <<'EOF' || fail "$results does not show a passing run"
import json, sys
r = json.load(open(sys.argv[1]))
outcomes = [t["outcome"] for t in r["tests"].values()]
print(f"unit_results.json: exit_status={r['exit_status']} tests={len(outcomes)} git_commit={r['git_commit'][:12]}")
sys.exit(0 if r["exit_status"] == 0 and outcomes and set(outcomes) <= {"passed", "skipped"} else 1)
EOF
lap "unit selection"

echo "== docker e2e: ownership as a non-root user"
docker_gid="$(getent group docker | cut -d: -f3 || true)"
if command -v setpriv >/dev/null 2>&1 && [[ -n "$docker_gid" && $(id -u) == 0 ]]; then
  uid=4321
  copy="$WORK/repo"
  mkdir "$copy"
  tar --exclude=./.venv --exclude=./.git --exclude=./tests/unit/unit_results.json \
      --exclude=./tests/unit/unit_results --exclude=./tests/functional/sft -cf - . | tar -C "$copy" -xf -
  chown -R "$uid:$uid" "$copy"
  setpriv --reuid "$uid" --regid "$uid" --groups "$docker_gid" \
    env -i PATH="$PATH" HOME="$WORK" CI=true CONTAINER="$TAG" \
    bash -c "umask 0022 && cd '$copy' && bash tests/run_unit_in_docker.sh tests/unit/test_config.py -q" \
    || fail "unit tests as uid $uid exited $?"
  [[ -f "$copy/tests/unit/unit_results.json" ]] || fail "no unit_results.json in the non-root copy"
  foreign="$(find "$copy" ! -uid "$uid" | head -5)"
  [[ -z "$foreign" ]] || fail "files not owned by the invoking user: $foreign"
  writable="$(find "$copy" -perm -0002 ! -type l | head -5)"
  [[ -z "$writable" ]] || fail "world-writable files left behind: $writable"
  echo "every file the container made belongs to uid $uid, modes per umask 0022"
else
  echo "skipped: needs root, setpriv and a docker group"
fi
lap "non-root ownership"

echo "== docker e2e: functional/sft.sh"
CONTAINER="$TAG" bash tests/run_functional_in_docker.sh functional/sft.sh || fail "functional/sft.sh in Docker exited $?"
checks=tests/functional/sft/checks.json
[[ -f "$checks" && "$checks" -nt "$MARK" ]] || fail "$checks was not written by this run"
python3 -c 'import json,sys; sys.exit(0 if json.load(open(sys.argv[1]))["passed"] else 1)' "$checks" \
  || fail "$checks: some checks failed"
lap "functional sft"

echo "== docker e2e: PASS in $(( $(date +%s) - T0 ))s"
printf '  %s\n' "${TIMES[@]}"
