#!/usr/bin/env bash
# Build the hermetic test image (docker/Dockerfile). See docs/docker.md.
#
#   bash docker/build.sh [--tag T] [--python 3.11|3.13] [--mcore] [--ray V] [--xdist V] [--base IMAGE] [--rebuild-base] [--no-cache]
#
# The image holds the project's dependencies only (uv.lock, group `test`); the repository
# itself is mounted at run time by tests/run_*_in_docker.sh.
set -euo pipefail

usage() {
  cat <<'EOF'
Usage: bash docker/build.sh [--tag T] [--python 3.11|3.13] [--mcore] [--ray V] [--xdist V] [--base IMAGE] [--rebuild-base] [--no-cache]

  --tag T          image tag (default: nemo-rl-test:latest, nemo-rl-test:mcore with --mcore,
                   nemo-rl-test:py3.13 with --python 3.13, nemo-rl-test:ray2.46.0 with --ray 2.46.0)
  --python V       3.11 (default: Debian 12 bookworm, Python 3.11.2 from Debian) or 3.13
                   (Debian 13 trixie); the base image and DEBIAN_SUITE follow
  --mcore          also install the `mcore` extra (megatron-core)
  --ray V          Ray V in place of the locked one (a last layer of its own: the rest is the
                   same image); CI tests the low end of the harness's Ray range with it
  --xdist V        pytest-xdist V in place of the locked one (in that same last layer); CI tests
                   the low end of the harness's pytest-xdist range with it
  --base IMAGE     base image (default: $BASE_IMAGE or python:V-slim-<suite>)
  --rebuild-base   rebuild the local Debian base even if it exists (only when the base cannot be pulled)
  --no-cache       do not reuse cached layers

Environment: DEBIAN_MIRROR (else read from /etc/apt/sources*), DEBIAN_SUITE (default: by --python),
CA_BUNDLE (default /etc/ssl/certs/ca-certificates.crt), UV_VERSION (default: the host's uv),
HTTP_PROXY/HTTPS_PROXY/NO_PROXY (forwarded to the build when set), DOCKER_BUILDER
(auto|buildx|buildkit|legacy, default auto).
EOF
}

die() { echo "docker/build.sh: $*" >&2; exit 2; }

TAG=""
MCORE=0
RAY_VERSION=""
XDIST_VERSION=""
BASE_IMAGE="${BASE_IMAGE:-}"
PYTHON_VERSION=3.11
REBUILD_BASE=0
NO_CACHE=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --tag) [[ $# -ge 2 ]] || die "--tag needs a value"; TAG="$2"; shift 2 ;;
    --tag=*) TAG="${1#--tag=}"; shift ;;
    --mcore) MCORE=1; shift ;;
    --ray) [[ $# -ge 2 ]] || die "--ray needs a value"; RAY_VERSION="$2"; shift 2 ;;
    --ray=*) RAY_VERSION="${1#--ray=}"; shift ;;
    --xdist) [[ $# -ge 2 ]] || die "--xdist needs a value"; XDIST_VERSION="$2"; shift 2 ;;
    --xdist=*) XDIST_VERSION="${1#--xdist=}"; shift ;;
    --python) [[ $# -ge 2 ]] || die "--python needs a value"; PYTHON_VERSION="$2"; shift 2 ;;
    --python=*) PYTHON_VERSION="${1#--python=}"; shift ;;
    --base) [[ $# -ge 2 ]] || die "--base needs a value"; BASE_IMAGE="$2"; shift 2 ;;
    --base=*) BASE_IMAGE="${1#--base=}"; shift ;;
    --rebuild-base) REBUILD_BASE=1; shift ;;
    --no-cache) NO_CACHE=(--no-cache); shift ;;
    -h|--help) usage; exit 0 ;;
    *) usage >&2; die "unknown argument: $1" ;;
  esac
done
# The Debian release whose own python3 is that version (the one a user on that release has).
case "$PYTHON_VERSION" in
  3.11) SUITE_FOR_PYTHON=bookworm ;;
  3.13) SUITE_FOR_PYTHON=trixie ;;
  *) usage >&2; die "--python must be 3.11 or 3.13 (the Pythons of Debian 12 and 13), got '$PYTHON_VERSION'" ;;
esac
[[ -z "$RAY_VERSION" || "$RAY_VERSION" =~ ^[0-9]+(\.[0-9]+)*$ ]] \
  || { usage >&2; die "--ray takes a release number such as 2.46.0, got '$RAY_VERSION'"; }
[[ -z "$XDIST_VERSION" || "$XDIST_VERSION" =~ ^[0-9]+(\.[0-9]+)*$ ]] \
  || { usage >&2; die "--xdist takes a release number such as 3.6.1, got '$XDIST_VERSION'"; }
if [[ -z "$TAG" ]]; then  # latest, mcore, py3.13, py3.13-mcore, ray2.46.0, ...
  variant=""
  [[ $PYTHON_VERSION == 3.11 ]] || variant="py$PYTHON_VERSION"
  [[ $MCORE == 0 ]] || variant="${variant:+$variant-}mcore"
  [[ -z "$RAY_VERSION" ]] || variant="${variant:+$variant-}ray$RAY_VERSION"
  [[ -z "$XDIST_VERSION" ]] || variant="${variant:+$variant-}xdist$XDIST_VERSION"
  TAG="nemo-rl-test:${variant:-latest}"
fi

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
APT_ETC="${NRL_APT_ETC:-/etc/apt}"   # overridable so tests can point at fake apt sources
DEBIAN_SUITE="${DEBIAN_SUITE:-$SUITE_FOR_PYTHON}"
BASE_IMAGE="${BASE_IMAGE:-python:$PYTHON_VERSION-slim-$DEBIAN_SUITE}"
LOCAL_BASE="nemo-rl-base:debian-${DEBIAN_SUITE}"

command -v docker >/dev/null 2>&1 || die "docker not found on PATH (install docker.io or Docker Engine)"
docker info >/dev/null 2>&1 || die "cannot reach the Docker daemon (start it: sudo dockerd >/tmp/dockerd.log 2>&1 &)"

# ---- Debian mirror from the host's apt sources (one-line *.list and deb822 *.sources) ----
# Prints "MIRROR SECURITY_MIRROR" (security may be "-"): the first enabled `deb` entry
# carrying $DEBIAN_SUITE (else any URI ending in /debian), and the one carrying SUITE-security.
apt_mirrors() {
  local files=()
  [[ -f "$APT_ETC/sources.list" ]] && files+=("$APT_ETC/sources.list")
  local f
  for f in "$APT_ETC"/sources.list.d/*.list "$APT_ETC"/sources.list.d/*.sources; do
    [[ -f "$f" ]] && files+=("$f")
  done
  [[ ${#files[@]} -gt 0 ]] || { echo "- -"; return; }
  awk -v suite="$DEBIAN_SUITE" '
    function consider(types, uris, suites, enabled,   n, i, u, s, ns, j) {
      if (enabled ~ /^[Nn]o$/ || types !~ /(^| )deb( |$)/) return
      n = split(uris, u, " "); ns = split(suites, s, " ")
      for (i = 1; i <= n; i++) {
        sub(/\/+$/, "", u[i])
        for (j = 1; j <= ns; j++) {
          if (s[j] == suite && main == "") main = u[i]
          if (s[j] == suite "-security" && sec == "") sec = u[i]
        }
        if (u[i] ~ /\/debian$/ && fallback == "") fallback = u[i]
      }
    }
    function flush() { if (t != "" || us != "") consider(t, us, ss, en); t = us = ss = en = "" }
    FILENAME ~ /\.sources$/ {
      if (FILENAME != cur) { flush(); cur = FILENAME }
      if ($0 ~ /^[ \t]*$/) { flush(); next }
      if ($0 ~ /^#/) next
      key = tolower($1); val = $0; sub(/^[^:]*:[ \t]*/, "", val)
      if (key == "types:") t = val; else if (key == "uris:") us = val
      else if (key == "suites:") ss = val; else if (key == "enabled:") en = val
      next
    }
    {
      if (cur != "") { flush(); cur = "" }
      line = $0; sub(/#.*/, "", line)
      n = split(line, w, " "); if (n < 3 || w[1] != "deb") next
      i = 2
      if (w[2] ~ /^\[/) { while (i <= n && w[i] !~ /\]$/) i++; i++ }
      consider("deb", w[i], w[i + 1], "")
    }
    END {
      flush()
      if (main == "") main = fallback
      printf "%s %s\n", (main == "" ? "-" : main), (sec == "" ? "-" : sec)
    }' "${files[@]}"
}

# ---- base image: pull it, or build an equivalent Debian base with debootstrap ----
build_debian_base() {
  local mirror security
  read -r mirror security < <(apt_mirrors)
  [[ -n "${DEBIAN_MIRROR:-}" ]] && mirror="$DEBIAN_MIRROR"
  [[ "$mirror" != "-" ]] || die "no Debian mirror in $APT_ETC/sources.list{,.d/*}; set DEBIAN_MIRROR=<url>"
  [[ $(id -u) == 0 ]] || die "building the Debian base with debootstrap needs root (run with sudo), or make $BASE_IMAGE pullable"
  if ! command -v debootstrap >/dev/null 2>&1; then
    command -v apt-get >/dev/null 2>&1 || die "debootstrap not found; install it, or make $BASE_IMAGE pullable"
    echo ">> installing debootstrap (apt-get)" >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q debootstrap >&2 || die "could not install debootstrap"
  fi
  local rootfs
  rootfs="$(mktemp -d /var/tmp/nrl-rootfs.XXXXXX)"
  trap 'rm -rf "$rootfs"' EXIT
  echo ">> debootstrap $DEBIAN_SUITE from $mirror (security: $security)" >&2
  debootstrap --variant=minbase "$DEBIAN_SUITE" "$rootfs" "$mirror" >&2 \
    || die "debootstrap failed (see the log above; mirror $mirror)"
  # Same apt sources inside the image as on the host, in deb822 form.
  rm -f "$rootfs/etc/apt/sources.list"
  {
    printf 'Types: deb\nURIs: %s\nSuites: %s %s-updates\nComponents: main\n' "$mirror" "$DEBIAN_SUITE" "$DEBIAN_SUITE"
    [[ "$security" != "-" ]] && printf '\nTypes: deb\nURIs: %s\nSuites: %s-security\nComponents: main\n' "$security" "$DEBIAN_SUITE"
  } > "$rootfs/etc/apt/sources.list.d/debian.sources"
  rm -rf "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/cache/apt/*.bin "$rootfs"/var/cache/apt/archives/*.deb
  tar --numeric-owner -C "$rootfs" -c . | docker import \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'ENV LANG=C.UTF-8' --change 'CMD ["bash"]' \
    --message "debootstrap $DEBIAN_SUITE from $mirror" - "$LOCAL_BASE" >/dev/null
  rm -rf "$rootfs"
  trap - EXIT
}

resolve_base() {
  if docker image inspect "$BASE_IMAGE" >/dev/null 2>&1; then echo "$BASE_IMAGE"; return; fi
  echo ">> pulling $BASE_IMAGE" >&2
  if timeout 120 docker pull -q "$BASE_IMAGE" >&2 2>/dev/null; then echo "$BASE_IMAGE"; return; fi
  echo ">> cannot pull $BASE_IMAGE (no registry reachable?): using a local Debian $DEBIAN_SUITE base" >&2
  if [[ $REBUILD_BASE == 1 ]] || ! docker image inspect "$LOCAL_BASE" >/dev/null 2>&1; then
    build_debian_base
  fi
  echo "$LOCAL_BASE"
}

# ---- builder: buildx > client with built-in BuildKit > legacy (same Dockerfile, cache mounts stripped) ----
pick_builder() {
  case "${DOCKER_BUILDER:-auto}" in
    buildx|buildkit|legacy) echo "$DOCKER_BUILDER"; return ;;
    auto) ;;
    *) die "DOCKER_BUILDER must be auto, buildx, buildkit or legacy" ;;
  esac
  if docker buildx version >/dev/null 2>&1; then echo buildx
  elif DOCKER_BUILDKIT=1 docker build --help >/dev/null 2>&1; then echo buildkit
  else echo legacy
  fi
}

start=$(date +%s)
base="$(resolve_base)"
echo ">> base $base ready after $(( $(date +%s) - start ))s" >&2
builder="$(pick_builder)"

# A small build context: the lock file, the pyproject files' dependency tables and the CA
# bundle only, so that the dependency layer's cache key is exactly (base, uv.lock, the
# dependencies): editing the code or a [tool.pytest]/[tool.testharness]/[tool.ruff] setting
# never rebuilds it, and the big repo (.venv) is never sent. docker/deps_pyproject.py needs
# Python 3.11+ (tomllib); an older python3 sends the whole files (same image, more rebuilds).
ctx="$(mktemp -d "${TMPDIR:-/tmp}/nrl-docker-ctx.XXXXXX")"
trap 'rm -rf "$ctx"' EXIT
mkdir -p "$ctx/tools/py"
cp "$REPO_ROOT/uv.lock" "$ctx/"
for f in pyproject.toml tools/py/pyproject.toml; do
  python3 "$REPO_ROOT/docker/deps_pyproject.py" "$REPO_ROOT/$f" >"$ctx/$f" 2>/dev/null || cp "$REPO_ROOT/$f" "$ctx/$f"
done
CA_BUNDLE="${CA_BUNDLE:-/etc/ssl/certs/ca-certificates.crt}"
if [[ -s "$CA_BUNDLE" ]]; then cp "$CA_BUNDLE" "$ctx/ca-bundle.crt"; else : > "$ctx/ca-bundle.crt"; fi
if [[ $builder == legacy ]]; then
  # The legacy builder has no RUN --mount; the uv cache then lives (and is deleted) inside the layer.
  sed -E 's/--mount=type=cache[^ ]* +//g' "$REPO_ROOT/docker/Dockerfile" > "$ctx/Dockerfile"
else
  cp "$REPO_ROOT/docker/Dockerfile" "$ctx/Dockerfile"
fi

uv_version="${UV_VERSION:-}"
if [[ -z "$uv_version" ]] && command -v uv >/dev/null 2>&1; then
  uv_version="$(uv --version 2>/dev/null | awk '{print $2}')" || uv_version=""
fi

args=(--tag "$TAG" --file "$ctx/Dockerfile" --build-arg "BASE_IMAGE=$base" --build-arg "PYTHON_VERSION=$PYTHON_VERSION"
  "${NO_CACHE[@]}")
[[ -n "$uv_version" ]] && args+=(--build-arg "UV_VERSION=$uv_version")
[[ $MCORE == 1 ]] && args+=(--build-arg "UV_EXTRAS=--extra mcore")
[[ -n "$RAY_VERSION" ]] && args+=(--build-arg "RAY_VERSION=$RAY_VERSION")
[[ -n "$XDIST_VERSION" ]] && args+=(--build-arg "XDIST_VERSION=$XDIST_VERSION")
for v in HTTP_PROXY HTTPS_PROXY NO_PROXY http_proxy https_proxy no_proxy; do
  [[ -n "${!v:-}" ]] && args+=(--build-arg "$v")   # predefined args: not kept in the image history
done

echo ">> building $TAG from $base (builder: $builder, uv ${uv_version:-default}${RAY_VERSION:+, Ray $RAY_VERSION}${XDIST_VERSION:+, pytest-xdist $XDIST_VERSION})" >&2
case "$builder" in
  buildx) docker buildx build --load "${args[@]}" "$ctx" ;;
  buildkit) DOCKER_BUILDKIT=1 docker build "${args[@]}" "$ctx" ;;
  legacy) DOCKER_BUILDKIT=0 docker build "${args[@]}" "$ctx" ;;
esac
echo ">> built $TAG in $(( $(date +%s) - start ))s; run: CONTAINER=$TAG bash tests/run_unit_in_docker.sh" >&2
