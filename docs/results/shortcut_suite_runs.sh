#!/usr/bin/env bash
# The shortcut audit criterion (docs/results.md, "Shortcut audit criterion, pre-registered
# 2026-11-28"; issue 42 item 9): the shortcut protocol on every cue kind and both controls of
# a family, each on its five trained models (model seeds 0-4, the family's recipe, cached by
# the SHA-256 of recipe and data), then the pass/fail table. Run it once the audit is final.
# Usage: docs/results/shortcut_suite_runs.sh STREAM   (STREAM: mnist | shapes | table)
# Each evaluation runs on one torch thread; the two streams side by side fit a 2-core machine.
set -euo pipefail
cd "$(dirname "$0")/../.."
export OMP_NUM_THREADS=1
CACHE=${MODEL_CACHE:-$HOME/.cache/repinterp/models}
OUT=docs/results/shortcut-suite
run() {  # DATASET: one evaluation, timed, into docs/results/shortcut-suite/DATASET (: -> -)
    local start=$SECONDS
    python -m repinterp evaluate --dataset "$1" --protocol shortcut --model-seeds 5 \
        --model-cache "$CACHE" --seed 0 --quiet --out "$OUT/${1//:/-}" --overwrite
    echo "$1: $((SECONDS - start)) s" | tee -a "$OUT/times.txt"
}
case ${1:?stream} in
mnist | shapes)
    mkdir -p "$OUT"
    for kind in mark:0.3 move:0.5 texture:0.3 majority:0.9 markrand:0.3 mark:0; do
        run "$1-$kind"
    done
    ;;
table) python -m studies.shortcut_criterion --runs "$OUT" ;;
*) echo "unknown stream $1" >&2; exit 2 ;;
esac
