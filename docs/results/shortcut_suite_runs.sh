#!/usr/bin/env bash
# The shortcut audit criteria (docs/results.md, "Shortcut audit criterion, pre-registered
# 2026-11-28", "Shortcut audit, second criterion, ..." to "..., sixth criterion, ..."; issue 42
# item 9): the shortcut protocol on every cue kind and both controls of a family, each on its
# five trained models (the family's recipe, cached by the SHA-256 of recipe and data), then the
# pass/fail table. Run it once the audit is final.
# Usage: docs/results/shortcut_suite_runs.sh CRITERION STREAM
#   CRITERION: first (model seeds 0-4, into shortcut-suite/) | second (seeds 200-204, into
#   shortcut-suite-2/) | third (seeds 300-304, into shortcut-suite-3/) | fourth (seeds 400-404,
#   into shortcut-suite-4/) | fifth (seeds 500-504, into shortcut-suite-5/) | sixth (seeds
#   600-604, into shortcut-suite-6/); STREAM: mnist | shapes (its six data sets) | shapes-shortcuts |
#   shapes-controls (four and two of them) | table
# Each evaluation runs on one torch thread; two streams side by side fit a 2-core machine
# (mnist and shapes-controls one after the other beside shapes-shortcuts take about as long).
set -euo pipefail
cd "$(dirname "$0")/../.."
export OMP_NUM_THREADS=1
CACHE=${MODEL_CACHE:-$HOME/.cache/repinterp/models}
case ${1:?criterion} in
first) FIRST=0 OUT=docs/results/shortcut-suite ;;
second) FIRST=200 OUT=docs/results/shortcut-suite-2 ;;
third) FIRST=300 OUT=docs/results/shortcut-suite-3 ;;
fourth) FIRST=400 OUT=docs/results/shortcut-suite-4 ;;
fifth) FIRST=500 OUT=docs/results/shortcut-suite-5 ;;
sixth) FIRST=600 OUT=docs/results/shortcut-suite-6 ;;
*) echo "unknown criterion $1" >&2; exit 2 ;;
esac
run() {  # DATASET...: one evaluation each, timed, into $OUT/DATASET (: -> -)
    mkdir -p "$OUT"
    for dataset in "$@"; do
        local start=$SECONDS
        python -m repinterp evaluate --dataset "$dataset" --protocol shortcut --model-seeds 5 \
            --model-seed-start "$FIRST" --model-cache "$CACHE" --seed 0 --quiet \
            --out "$OUT/${dataset//:/-}" --overwrite
        echo "$dataset: $((SECONDS - start)) s" | tee -a "$OUT/times.txt"
    done
}
SHORTCUTS=(mark:0.3 move:0.5 texture:0.3 majority:0.9)
CONTROLS=(markrand:0.3 mark:0)
case ${2:?stream} in
mnist | shapes) run "${SHORTCUTS[@]/#/$2-}" "${CONTROLS[@]/#/$2-}" ;;
shapes-shortcuts) run "${SHORTCUTS[@]/#/shapes-}" ;;
shapes-controls) run "${CONTROLS[@]/#/shapes-}" ;;
table) python -m studies.shortcut_criterion --criterion "$1" --runs "$OUT" ;;
*) echo "unknown stream $2" >&2; exit 2 ;;
esac
