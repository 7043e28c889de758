#!/usr/bin/env bash
# The wheels a GPU machine without a package registry needs for the suite (bench/gpu_validate.sh,
# bench/gpu_suite_time.sh): the packages its image lacks, at the versions of uv.lock, for
# CPython 3.12 on x86-64, plus a wheel of the harness (tools/py).
#
#   bash bench/gpu_wheels.sh [DIR]          # default .whl (ignored by git)
#
# Hugging Face's packages come at the lock's versions even where the machine has its own: the
# H200 image's transformers imports scikit-learn, scipy and pandas with every model class
# (3,553 modules, 11.9 s per process there; the lock's imports 1,463), and every policy worker
# and example script pays it. huggingface-hub 2 needs httpx2, httpcore2 and truststore, which the
# image lacks.
# Ray's wheel is repacked without its Java jars, dashboard source maps and the libraries the
# tests never import (rllib, tune, train, llm, serve, data: only the dashboard head, off in
# the tests, loads them), so that the set fits a 64 MiB transfer.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
DIR="${1:-.whl}"
NEEDED=(ray jsonschema jsonschema-specifications referencing rpds-py omegaconf antlr4-python3-runtime
        math-verify latex2sympy2-extended pytest pluggy iniconfig pytest-xdist execnet pytest-testmon
        pytest-rerunfailures pytest-cov coverage pytest-timeout pytest-asyncio py-spy
        transformers huggingface-hub tokenizers safetensors httpx2 httpcore2 truststore)
pattern="^($(IFS='|'; echo "${NEEDED[*]}"))=="
mapfile -t pins < <(uv export --format requirements-txt --no-hashes --group test --no-emit-project --quiet \
    | grep -E "$pattern" | sed 's/ *;.*//')
(( ${#pins[@]} == ${#NEEDED[@]} )) || { echo "gpu_wheels: uv.lock pins ${#pins[@]} of ${#NEEDED[@]} packages: ${pins[*]}" >&2; exit 2; }
rm -rf "$DIR"; mkdir -p "$DIR"
platforms=()
for n in 17 27 28 34 35 39; do platforms+=(--platform "manylinux_2_${n}_x86_64"); done
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    "${platforms[@]}" --platform manylinux2014_x86_64 --platform manylinux1_x86_64 -d "$DIR" "${pins[@]}"
ray_wheel=$(ls "$DIR"/ray-*.whl)
python3 - "$ray_wheel" <<'EOF'
import sys, zipfile, os
src = sys.argv[1]; tmp = src + ".tmp"
UNUSED = tuple(f"ray/{lib}/" for lib in ("rllib", "tune", "train", "llm", "serve", "data"))
with zipfile.ZipFile(src) as zin, zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as zout:
    for item in zin.infolist():
        if item.filename.endswith((".jar", ".map")) or item.filename.startswith(UNUSED):
            continue
        zout.writestr(item, zin.read(item.filename))
os.replace(tmp, src)
EOF
uv build -q --wheel tools/py -o "$DIR"
du -sh "$DIR"; ls "$DIR"
