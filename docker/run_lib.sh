# shellcheck shell=bash
# Host side of the hermetic runs; sourced by tests/run_unit_in_docker.sh and
# tests/run_functional_in_docker.sh. Not meant to be run by itself.
#
# nrl_docker_run USAGE CMD [ARGS...]
#   Checks that docker exists, CONTAINER is set (USAGE + exit 2 otherwise) and a daemon
#   answers (one line + exit 2 otherwise), then runs
#   CMD in $CONTAINER with the repository mounted at /workspace, through
#   docker/entrypoint.sh (root inside, files handed back to the invoking user at the end),
#   and exits with CMD's exit status.
#
# Knobs (environment): CONTAINER (required); HF_TOKEN, WANDB_API_KEY, HF_HUB_OFFLINE (passed
# by name when set); HF_HOME (default <repo>/hf_home, as upstream) and HF_DATASETS_CACHE (when
# set): a folder inside the checkout is used through the /workspace mount, any other is
# mounted at the same path; DOCKER_GPUS (auto | none | a value for --gpus, default auto),
# DOCKER_RUN_ARGS (extra `docker run` arguments, split on spaces), CI (no -it when set).

_NRL_REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

# Prints the GPU arguments for `docker run` (one per line), or nothing.
nrl_gpu_args() {
  case "${DOCKER_GPUS:-auto}" in
    none|0|"") return 0 ;;
    auto) ;;
    *) printf -- '--gpus\n%s\n' "$DOCKER_GPUS"; return 0 ;;
  esac
  command -v nvidia-smi >/dev/null 2>&1 || return 0
  nvidia-smi -L 2>/dev/null | grep -q '^GPU ' || return 0
  # The host has GPUs; does Docker know how to hand them over?
  if docker info --format '{{json .Runtimes}}' 2>/dev/null | grep -q nvidia \
     || command -v nvidia-container-runtime-hook >/dev/null 2>&1; then
    printf -- '--gpus\nall\n'
    return 0
  fi
  local dirs d
  dirs="$(docker info --format '{{range .CDISpecDirs}}{{.}} {{end}}' 2>/dev/null || true)"
  for d in $dirs; do
    if compgen -G "$d/*nvidia*" >/dev/null; then
      printf -- '--device\nnvidia.com/gpu=all\n'
      return 0
    fi
  done
  echo "warning: NVIDIA GPUs found but Docker has no nvidia runtime or CDI spec (install nvidia-container-toolkit): running without GPUs" >&2
}

# nrl_add_cache NAME DIR: adds to nrl_docker_run's `args` what gives the container the host
# folder DIR as $NAME. DIR is created first (else the daemon makes it, owned by root); inside
# the checkout it is reached through the /workspace mount, elsewhere it is mounted at the same
# path, so paths in logs and configs mean the same on both sides.
nrl_add_cache() {
  local name="$1" dir="$2" repo
  if ! mkdir -p "$dir" 2>/dev/null || ! dir="$(cd "$dir" && pwd -P)"; then
    echo "error: cannot create $name=$2 (set $name to a folder you can write)" >&2
    exit 2
  fi
  repo="$(cd "$_NRL_REPO_ROOT" && pwd -P)"
  if [[ "$dir" == "$repo" || "$dir" == "$repo"/* ]]; then
    args+=(-e "$name=/workspace${dir#"$repo"}")
  else
    args+=(-v "$dir:$dir" -e "$name=$dir")
  fi
}

nrl_docker_run() {
  local usage="$1"
  shift
  if ! command -v docker >/dev/null 2>&1; then
    printf '%s\n' "$usage" >&2
    echo "error: docker not found on PATH" >&2
    exit 2
  fi
  if [[ -z "${CONTAINER:-}" ]]; then
    printf '%s\n' "$usage" >&2
    echo "error: CONTAINER is not set (build an image with: bash docker/build.sh)" >&2
    exit 2
  fi

  local why
  if ! why="$(docker info --format '{{.ServerVersion}}' 2>&1 >/dev/null)"; then
    echo "error: no Docker daemon answers (${why%%$'\n'*}); start it (e.g. 'sudo systemctl start docker', or 'dockerd &') or set DOCKER_HOST" >&2
    exit 2
  fi

  local args=(run --rm
    # tini as PID 1, signalling the whole process group: docker stop / Ctrl-C reach the tests
    # and the entrypoint still hands the files back.
    --init -e TINI_KILL_PROCESS_GROUP=1
    # Ray's object store and NCCL want more than Docker's 64 MB /dev/shm.
    --ipc=host
    -v "$_NRL_REPO_ROOT:/workspace" -w /workspace
    -e "HOST_UID=$(id -u)" -e "HOST_GID=$(id -g)" -e "HOST_UMASK=$(umask)")
  # Names only: docker copies the values from this environment, so the token never appears
  # on a command line.
  local v
  for v in HF_TOKEN WANDB_API_KEY HF_HUB_OFFLINE CI; do
    [[ -n "${!v:-}" ]] && args+=(-e "$v")
  done
  # Hugging Face caches survive the container: HF_HOME defaults to <repo>/hf_home (upstream's
  # default, git-ignored); HF_DATASETS_CACHE only when set (else it lives in HF_HOME).
  nrl_add_cache HF_HOME "${HF_HOME:-$_NRL_REPO_ROOT/hf_home}"
  [[ -z "${HF_DATASETS_CACHE:-}" ]] || nrl_add_cache HF_DATASETS_CACHE "$HF_DATASETS_CACHE"
  local gpu
  while IFS= read -r gpu; do
    [[ -n "$gpu" ]] && args+=("$gpu")
  done < <(nrl_gpu_args)
  if [[ -t 0 && -z "${CI:-}" ]]; then
    args+=(-it)
  fi
  if [[ -n "${DOCKER_RUN_ARGS:-}" ]]; then
    local extra
    read -r -a extra <<< "$DOCKER_RUN_ARGS"
    args+=("${extra[@]}")
  fi
  args+=("$CONTAINER" bash docker/entrypoint.sh "$@")
  exec docker "${args[@]}"
}
