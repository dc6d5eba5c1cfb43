#!/usr/bin/env bash
# The pre-registered primary family's runs (issue 43; docs/results.md, "Primary family"):
# `unseen` with only the family's methods, on models of seeds never used to choose a setting
# (10 onward), in chunks of five models, each chunk a folder docs/results/DATA-primary-S.
# Usage: docs/results/primary_runs.sh STREAM [FIRST_SEED ...]
#   (STREAM: mnist5k: seeds 10-24 | shapes: seeds 10-26; FIRST_SEED: only those chunks)
# Then: python -m studies.primary (decides the family from the chunks' per_run).
set -euo pipefail
cd "$(dirname "$0")/../.."
export OMP_NUM_THREADS=1
CACHE=${MODEL_CACHE:-$HOME/.cache/repinterp/models}
OUT=docs/results
chunk() {  # DATA FIRST COUNT: models FIRST .. FIRST + COUNT - 1, timed
    local start=$SECONDS
    python -m repinterp evaluate --dataset "$1" --protocol unseen \
        --methods RI,Grad-CAM,Score-CAM,Grad-CAM+class --metrics none \
        --model-seeds "$3" --model-seed-start "$2" --seed "$2" --model-cache "$CACHE" \
        --quiet --out "$OUT/$1-primary-$2"
    echo "$1-primary-$2: $((SECONDS - start)) s" | tee -a "$OUT/primary-times.txt"
}
case ${1:?stream} in
mnist5k) chunks=("10 5" "15 5" "20 5") ;;
shapes) chunks=("10 5" "15 5" "20 5" "25 2") ;;
*) echo "unknown stream $1" >&2; exit 2 ;;
esac
for c in "${chunks[@]}"; do
    read -r first count <<<"$c"
    if [ $# -gt 1 ] && [[ " ${*:2} " != *" $first "* ]]; then continue; fi
    chunk "$1" "$first" "$count"
done
