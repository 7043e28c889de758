#!/usr/bin/env bash
# Install into /tmp/site (--no-deps) what the carried wheels of WHEEL_DIR give a GPU machine
# without uv or a registry, then check they fit the image's torch (bench/gpu_suite_time.sh,
# bench/gpu_loop.sh). Afterwards: PYTHONPATH=/tmp/site, PATH=/tmp/site/bin.
#
#   bash bench/gpu_install.sh WHEEL_DIR
#
# The wheels whose package python3 lacks, and always the test tools, Ray and Hugging Face's
# packages (their versions must match the lock). WHEEL_DIR holds a wheel of tools/py too: its
# entry point loads the harness as `uv sync` would.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
WHEELS="${1:?usage: bash bench/gpu_install.sh WHEEL_DIR}"
OUT="${OUT:-/tmp/gpu_out}"; mkdir -p "$OUT"
export PYTHONPATH="/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
mapfile -t todo < <(python3 - "$WHEELS" <<'EOF'
import importlib.metadata as md, pathlib, sys
always = {"pytest", "pluggy", "iniconfig", "pytest_xdist", "execnet", "pytest_testmon",
          "pytest_rerunfailures", "pytest_cov", "coverage", "ray", "testharness", "py_spy",
          "transformers", "huggingface_hub", "tokenizers", "safetensors"}  # the lock's, see gpu_wheels.sh
for wheel in sorted(pathlib.Path(sys.argv[1]).glob("*.whl")):
    name = wheel.name.split("-")[0].lower()
    try:
        md.version(name)
        present = True
    except md.PackageNotFoundError:
        present = False
    if name in always or not present:
        print(wheel)
EOF
)
echo "installing ${#todo[@]} wheels: ${todo[*]##*/}"
python3 -m pip install -q --no-index --no-deps --no-cache-dir --upgrade --target /tmp/site \
    "${todo[@]}" || exit 2
nvidia-smi -L | tee "$OUT/gpus.txt"
# The carried wheels over the image's own torch: stop here, not mid-suite, if they do not fit.
python3 -c 'import ray, torch, transformers; from transformers import AutoModelForCausalLM
print("python", __import__("sys").version.split()[0], "torch", torch.__version__,
  "transformers", transformers.__version__, "ray", ray.__version__)' | tee "$OUT/versions.txt" || exit 2
