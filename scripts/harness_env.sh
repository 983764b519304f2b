#!/usr/bin/env bash
# Another evaluation harness beside vlbench's main venv, never inside it: `make test` calls this for lmms-eval
# and Inspect; the exported-task tests run the harness with vlbench's own python and this folder's paths in
# front of PYTHONPATH (`harness/`, `deps/`, `stubs/`; the folder is what it prints).
#
# Recipe (measured, ../shared/recipes/lmms-eval-offline.md for lmms-eval; the same for Inspect): the harness is
# installed with --no-deps into `harness/`; its own dependencies that vlbench's venv lacks go into `deps/`, each
# pinned and without dependencies (so none of them can bring a torch, numpy, datasets, pydantic or httpx that
# would shadow vlbench's); `stubs/` holds a `decord` stand-in for lmms-eval, whose llava_hf imports decord at
# module level although image tasks never call it. Inspect's OpenAI provider uses the `openai` package that
# vlbench's venv already has.
#
# The folder lives outside the checkout (a fresh clone on the same machine reuses it), named by the harness, its
# version and the hash of this file and of the python that runs it (compiled wheels are built for one python);
# a half-built folder is never reused (it is renamed into place complete).
#
# Usage: scripts/harness_env.sh lmms-eval|inspect PYTHON   (prints the folder)
set -euo pipefail

harness="${1:?usage: $0 lmms-eval|inspect PYTHON}"
py="${2:?usage: $0 lmms-eval|inspect PYTHON}"
# each harness's imports that vlbench's environment does not have, at the versions pip resolved on 2026-11-26
case "$harness" in
lmms-eval)
    package="lmms-eval==0.7.3"
    check="import lmms_eval.models.simple.llava_hf, lmms_eval.api.task"
    deps="aiohappyeyeballs==2.7.1 aiohttp==3.14.5 aiosignal==1.4.0 attrs==26.1.0 chardet==6.0.0.post1
dataproperty==1.1.1 einops==0.8.2 evaluate==0.4.6 frozenlist==1.8.0 ftfy==6.3.1 jsonlines==4.0.0 loguru==0.7.3
lxml==6.1.3 mbstrdecoder==1.1.5 multidict==7.2.1 numexpr==2.14.2 pathvalidate==3.3.1 portalocker==4.4.2
propcache==0.5.4 pytablewriter==1.2.1 python-dotenv==1.2.4 pytz==2026.6 sacrebleu==2.6.0 six==1.17.0
sqlitedict==2.1.0 tabledata==1.3.5 tabulate==0.10.0 tcolorpy==0.1.7 tenacity==9.2.1 tqdm-multiprocess==0.0.11
typepy==1.3.5 wcwidth==0.9.4 yarl==1.25.1" ;;
inspect)
    package="inspect-ai==0.3.285"
    check="import inspect_ai, inspect_ai.model._providers.openai"
    deps="agent-client-protocol==0.12.1 aiobotocore==3.10.0 aiohappyeyeballs==2.7.1 aiohttp==3.14.5
aioitertools==0.13.0 aiosignal==1.4.0 attrs==26.1.0 beautifulsoup4==4.15.0 boto3==1.43.117 botocore==1.43.117
debugpy==1.8.22 docstring-parser==0.18.0 frozenlist==1.8.0 ijson==3.6.0 jmespath==1.1.0 jsonlines==4.0.0
jsonpatch==1.48 jsonpath-ng==1.16.0 jsonpointer==3.12 jsonref==1.1.0 jsonschema==4.26.0
jsonschema-specifications==2025.9.1 linkify-it-py==2.2.0 mdit-py-plugins==0.7.0 mmh3==5.3.1 multidict==7.2.1
nest-asyncio2==1.7.4 pathlib-abc==0.5.2 propcache==0.5.4 python-dotenv==1.2.4 referencing==0.37.0
rpds-py==2026.9.1 s3fs==2026.6.0 s3transfer==0.19.3 semver==3.1.2 shortuuid==1.0.13 six==1.17.0 soupsieve==4.1.3
tenacity==9.2.1 textual==8.2.8 tiktoken==0.14.0 universal-pathlib==0.3.10 wrapt==2.5.2 yarl==1.25.1
zipfile-zstd==0.0.4 zipp==4.1.2" ;;
*)
    echo "usage: $0 lmms-eval|inspect PYTHON" >&2
    exit 2 ;;
esac

here="$(cd "$(dirname "$0")" && pwd)"
version="$("$py" -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
recipe_hash="$( (cat "$here/harness_env.sh"; echo "$version") | sha256sum | cut -c1-12)"
root="${VLBENCH_HARNESS_ROOT:-${XDG_CACHE_HOME:-$HOME/.cache}/vlbench}"
folder="$root/${package/==/-}-$recipe_hash"

if [ -d "$folder" ]; then
    echo "$folder"
    exit 0
fi

mkdir -p "$root"
building="$folder.building.$$"
trap 'rm -rf "$building"' EXIT
mkdir -p "$building/stubs"
"$py" -m pip install -q --disable-pip-version-check --no-deps --target "$building/harness" "$package" >&2
# shellcheck disable=SC2086
"$py" -m pip install -q --disable-pip-version-check --no-deps --target "$building/deps" $deps >&2
if [ "$harness" = lmms-eval ]; then
    mkdir "$building/stubs/decord"
    printf 'VideoReader = None\n\n\ndef cpu(*args, **kwargs):\n    return None\n' >"$building/stubs/decord/__init__.py"
fi
PYTHONPATH="$building/harness:$building/deps:$building/stubs" "$py" -c "$check" >&2
# a folder another run completed meanwhile is kept (mv -T never moves into it); this one is then discarded
mv -T "$building" "$folder" 2>/dev/null || true
echo "$folder"
