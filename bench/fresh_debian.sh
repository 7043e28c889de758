#!/usr/bin/env bash
# A newcomer on a bare Debian: a fresh clone, `pip install uv`, the README's two commands
# (`uv run examples/run_sft.py`, then `uv run --group test bash tests/run_unit.sh`, serially),
# in a container of Debian's own packages (its python3: 12 -> 3.11.2, 13 -> 3.13). Prints a table.
#
#   bash bench/fresh_debian.sh [bookworm|trixie ...]     (default: both; root, Docker, debootstrap)
#
# The base is the one docker/build.sh makes without a registry (nemo-rl-base:debian-SUITE:
# `bash docker/build.sh --python 3.11|3.13` makes it). The clone is of this checkout's HEAD (commit first). Nothing is
# cached between runs: uv downloads every wheel, as on a newcomer's machine.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
SUITES=("$@")
((${#SUITES[@]})) || SUITES=(bookworm trixie)
CA="${CA_BUNDLE:-/etc/ssl/certs/ca-certificates.crt}"
OUT=$(mktemp -d /tmp/fresh_debian.XXXXXX)
docker info >/dev/null 2>&1 || { echo "fresh_debian: no Docker daemon answers (start dockerd)" >&2; exit 2; }

# Inside: Debian's python3 and git, uv in a venv (Debian's pip refuses system-wide installs,
# PEP 668), the clone, the two commands; times and the last lines of each go to /out.
INSIDE='set -uo pipefail
export DEBIAN_FRONTEND=noninteractive SSL_CERT_FILE=/ca.crt PIP_CERT=/ca.crt CI=true
apt-get update -qq && apt-get install -y -qq python3 python3-venv git ca-certificates >/dev/null
python3 -c "import platform; print(platform.python_version())" > /out/python
git clone -q /src /home/newcomer && cd /home/newcomer
python3 -m venv /opt/uv && /opt/uv/bin/pip install -q uv && export PATH=/opt/uv/bin:$PATH
t0=$SECONDS; uv run examples/run_sft.py > /out/sft.log 2>&1; echo "$? $((SECONDS - t0))" > /out/sft
t0=$SECONDS; uv run --group test bash tests/run_unit.sh > /out/unit.log 2>&1; echo "$? $((SECONDS - t0))" > /out/unit'

printf '| Debian | python3 | run_sft.py (exit, wall incl. install) | run_unit.sh (exit, wall) | pytest summary |\n|---|---|---|---|---|\n'
for suite in "${SUITES[@]}"; do
  image="nemo-rl-base:debian-$suite"
  if ! docker image inspect "$image" >/dev/null 2>&1; then
    python=3.11; [[ $suite == trixie ]] && python=3.13
    echo "fresh_debian: no $image; make it with: bash docker/build.sh --python $python" >&2
    exit 2
  fi
  mkdir -p "$OUT/$suite"
  docker run --rm --shm-size=2g -v "$PWD:/src:ro" -v "$CA:/ca.crt:ro" -v "$OUT/$suite:/out" "$image" bash -c "$INSIDE" >&2 || true
  read -r sft_rc sft_s < "$OUT/$suite/sft" || true
  read -r unit_rc unit_s < "$OUT/$suite/unit" || true
  summary=$(grep -E '^=+ .* in [0-9.]+s' "$OUT/$suite/unit.log" | tail -1 | tr -d '=' | sed 's/^ *//;s/ *$//')
  printf '| %s | %s | %s, %s s | %s, %s s | %s |\n' "$suite" "$(cat "$OUT/$suite/python" 2>/dev/null)" \
    "${sft_rc:-?}" "${sft_s:-?}" "${unit_rc:-?}" "${unit_s:-?}" "${summary:-see $OUT/$suite/unit.log}"
done
echo "logs: $OUT" >&2
