#!/usr/bin/env bash
# lmms-eval 0.7.3 beside vlbench's main venv, never inside it: `make test` calls this; the exported-task tests
# run lmms-eval with vlbench's own python and this folder's three paths in front of PYTHONPATH (what it prints).
#
# Recipe (measured, ../shared/recipes/lmms-eval-offline.md): lmms-eval is installed with --no-deps into
# `lmms/`; its own dependencies that vlbench's venv lacks go into `deps/`, each pinned and without dependencies
# (so none of them can bring a torch, numpy or datasets that would shadow vlbench's CPU builds); `stubs/` holds
# a `decord` stand-in, because lmms-eval's llava_hf imports decord at module level and image tasks never call it.
#
# The folder lives outside the checkout (a fresh clone on the same machine reuses it), named by the hash of this
# file and of the python that runs it (compiled wheels are built for one python); a half-built folder is never
# reused (the stamp is written last).
#
# Usage: scripts/lmms_eval_env.sh PYTHON   (prints the folder)
set -euo pipefail

LMMS_EVAL_VERSION=0.7.3
# lmms-eval's imports that vlbench's environment does not have, at the versions pip resolved on 2026-11-26
DEPS="aiohappyeyeballs==2.7.1 aiohttp==3.14.5 aiosignal==1.4.0 attrs==26.1.0 chardet==6.0.0.post1
dataproperty==1.1.1 einops==0.8.2 evaluate==0.4.6 frozenlist==1.8.0 ftfy==6.3.1 jsonlines==4.0.0 loguru==0.7.3
lxml==6.1.3 mbstrdecoder==1.1.5 multidict==7.2.1 numexpr==2.14.2 pathvalidate==3.3.1 portalocker==4.4.2
propcache==0.5.4 pytablewriter==1.2.1 python-dotenv==1.2.4 pytz==2026.6 sacrebleu==2.6.0 six==1.17.0
sqlitedict==2.1.0 tabledata==1.3.5 tabulate==0.10.0 tcolorpy==0.1.7 tenacity==9.2.1 tqdm-multiprocess==0.0.11
typepy==1.3.5 wcwidth==0.9.4 yarl==1.25.1 zstandard==0.25.0"

py="${1:?usage: $0 PYTHON}"
here="$(cd "$(dirname "$0")" && pwd)"
version="$("$py" -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
recipe_hash="$( (cat "$here/lmms_eval_env.sh"; echo "$version") | sha256sum | cut -c1-12)"
root="${VLBENCH_HARNESS_ROOT:-${XDG_CACHE_HOME:-$HOME/.cache}/vlbench}"
folder="$root/lmms-eval-$LMMS_EVAL_VERSION-$recipe_hash"
stamp="$folder/.vlbench-installed"

if [ -f "$stamp" ]; then
    echo "$folder"
    exit 0
fi

mkdir -p "$root"
building="$folder.building.$$"
trap 'rm -rf "$building"' EXIT
mkdir -p "$building/stubs/decord"
# shellcheck disable=SC2086
"$py" -m pip install -q --disable-pip-version-check --no-deps --target "$building/lmms" "lmms-eval==$LMMS_EVAL_VERSION" >&2
# shellcheck disable=SC2086
"$py" -m pip install -q --disable-pip-version-check --no-deps --target "$building/deps" $DEPS >&2
printf 'VideoReader = None\n\n\ndef cpu(*args, **kwargs):\n    return None\n' >"$building/stubs/decord/__init__.py"
PYTHONPATH="$building/lmms:$building/deps:$building/stubs" "$py" -c \
    "import lmms_eval.models.simple.llava_hf, lmms_eval.api.task; print('lmms-eval', '$LMMS_EVAL_VERSION')" >&2
touch "$building/.vlbench-installed"
rm -rf "$folder"
mv "$building" "$folder"
echo "$folder"
