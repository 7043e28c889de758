#!/usr/bin/env bash
# shellcheck disable=SC2317  # the functions below run from traps (shellcheck cannot see that)
# Runs INSIDE the container (from the mounted repo, so it never needs an image rebuild):
#   bash docker/entrypoint.sh [--prepare-assets] CMD [ARGS...]
# Runs CMD as root, then hands the files this run created in the repo back to the host user
# (HOST_UID/HOST_GID, modes per HOST_UMASK), and exits with CMD's status.
#
# Why root + umask 0000 while running (for a non-root host user): root needs no passwd entry
# or writable HOME for Ray, triton or HF caches; umask 0000 means that even a run killed
# before the hand-back (SIGKILL) leaves files the user can still edit and delete. The
# hand-back then gives them the owner and mode the user's own shell would have given them.
# Files that were root-owned before the run are never touched.
set -uo pipefail

WORKSPACE="${NRL_WORKSPACE:-/workspace}"
HOST_UID="${HOST_UID:-0}"
HOST_GID="${HOST_GID:-0}"
HOST_UMASK="${HOST_UMASK:-0022}"

PREPARE_ASSETS=0
if [[ "${1:-}" == "--prepare-assets" ]]; then
  PREPARE_ASSETS=1
  shift
fi
if [[ $# -eq 0 ]]; then
  echo "usage: bash docker/entrypoint.sh [--prepare-assets] CMD [ARGS...]" >&2
  exit 2
fi

# umask digits -> chmod clauses, e.g. 0027 -> "g-w,o-rwx" (empty for 0000).
umask_to_chmod() {
  local m="${1: -3}" out="" who i d p
  for i in 0 1 2; do
    who=(u g o); d="${m:$i:1}"; p=""
    (( d & 4 )) && p+=r; (( d & 2 )) && p+=w; (( d & 1 )) && p+=x
    [[ -n "$p" ]] && out+="${out:+,}${who[$i]}-$p"
  done
  echo "$out"
}

# NUL-separated, sorted list of the root-owned paths in the repo (the host's .venv skipped).
root_owned() {
  find "$WORKSPACE" -xdev -path "$WORKSPACE/.venv" -prune -o -uid 0 -print0 2>/dev/null | sort -z
}

BEFORE=""
hand_back() {
  [[ "$HOST_UID" == 0 || -z "$BEFORE" ]] && return 0
  local clauses new
  clauses="$(umask_to_chmod "$HOST_UMASK")"
  new="$(mktemp)"
  # Only what this run created: root-owned paths that were not there before it.
  comm -z -13 "$BEFORE" <(root_owned) >"$new"
  xargs -0 -r chown -h "$HOST_UID:$HOST_GID" <"$new" 2>/dev/null
  # Modes as the user's umask would have made them; never through links (chmod follows them).
  if [[ -n "$clauses" ]]; then
    while IFS= read -r -d '' p; do
      [[ -L "$p" ]] || printf '%s\0' "$p"
    done <"$new" | xargs -0 -r chmod "$clauses" 2>/dev/null
  fi
  rm -f "$new" "$BEFORE"
  return 0
}

if [[ "$HOST_UID" == 0 ]]; then
  umask "$HOST_UMASK"   # the host user is root: files are theirs already
else
  umask 0000
  BEFORE="$(mktemp)"
  root_owned >"$BEFORE"
fi

# An image built from another uv.lock runs stale dependencies: say so (the run goes on).
LOCK_SHA_FILE="${NRL_LOCK_SHA_FILE:-/opt/nrl/uv.lock.sha256}"   # written by docker/Dockerfile
if [[ -f "$LOCK_SHA_FILE" && -f "$WORKSPACE/uv.lock" ]]; then
  if [[ "$(sha256sum "$WORKSPACE/uv.lock" | cut -d' ' -f1)" != "$(cat "$LOCK_SHA_FILE")" ]]; then
    echo "warning: this image was built from another uv.lock; rebuild it: bash docker/build.sh" >&2
  fi
fi

trap hand_back EXIT
# docker stop / Ctrl-C: with `docker run --init -e TINI_KILL_PROCESS_GROUP=1` the signal reaches
# CMD too; once CMD is gone these traps end the script, and the EXIT trap still hands back.
trap 'exit 130' INT
trap 'exit 143' TERM
# Test assets are built offline, here, if missing (a complete set is reused in about a second).
assets_script="$WORKSPACE/tests/unit/prepare_unit_test_assets.py"
if [[ $PREPARE_ASSETS == 1 && -f "$assets_script" ]]; then
  python "$assets_script" || { echo "error: building the test assets failed ($assets_script)" >&2; exit 1; }
fi

"$@"
rc=$?
exit "$rc"
