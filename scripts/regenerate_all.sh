#!/usr/bin/env bash
# Build every registered benchmark whose raw sources are present under SOURCES_ROOT.
#   scripts/regenerate_all.sh SOURCES_ROOT OUT_ROOT
# SOURCES_ROOT holds one folder per raw source, as `vlbench sample-sources` writes them
# (e.g. SOURCES_ROOT/gqa/{val,testdev}_balanced_questions.json); each benchmark is built into
# OUT_ROOT/<name> with its legacy files, then verified.
set -euo pipefail
if [ $# -ne 2 ]; then
  echo "usage: $0 SOURCES_ROOT OUT_ROOT" >&2
  exit 2
fi
src=$1
out=$2
vlbench=${VLBENCH:-vlbench}
benches=$($vlbench list --sources-present "$src" --names)
if [ -z "$benches" ]; then
  echo "no raw sources of any benchmark under $src (see \`vlbench list\`)" >&2
  exit 2
fi
for bench in $benches; do
  echo "== $bench"
  $vlbench build "$bench" --source "$src" --out "$out/$bench" --legacy-json
  $vlbench verify "$out/$bench"
done
