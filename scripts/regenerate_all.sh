#!/usr/bin/env bash
# Build every registered benchmark whose raw sources are present under SOURCES_ROOT.
#   scripts/regenerate_all.sh SOURCES_ROOT OUT_ROOT [BENCH:KEY=VALUE ...]
# SOURCES_ROOT holds one folder per raw source, as `vlbench sample-sources` writes them
# (e.g. SOURCES_ROOT/gqa/{val,testdev}_balanced_questions.json, SOURCES_ROOT/vcr/val.jsonl); each
# benchmark is built into OUT_ROOT/<name> with its legacy files, then verified. BENCH:KEY=VALUE
# passes `--param KEY=VALUE` to that benchmark's build, e.g. vcr-visor:nli_model=none.
set -euo pipefail
if [ $# -lt 2 ]; then
  echo "usage: $0 SOURCES_ROOT OUT_ROOT [BENCH:KEY=VALUE ...]" >&2
  exit 2
fi
src=$1
out=$2
shift 2
vlbench=${VLBENCH:-vlbench}
benches=$($vlbench list --sources-present "$src" --names)
if [ -z "$benches" ]; then
  echo "no raw sources of any benchmark under $src (see \`vlbench list\`)" >&2
  exit 2
fi
for bench in $benches; do
  sets=()
  for override in "$@"; do
    case "$override" in
      "$bench:"*) sets+=(--param "${override#"$bench:"}") ;;
    esac
  done
  echo "== $bench"
  $vlbench build "$bench" --source "$src" --out "$out/$bench" --legacy-json "${sets[@]}"
  $vlbench verify "$out/$bench"
done
