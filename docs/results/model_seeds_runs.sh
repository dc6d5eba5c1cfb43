#!/usr/bin/env bash
# The headline protocols on five trained models per data set (issue 28): each run r of a
# protocol explains with its own model (seed r of the data set's recipe, cached by the SHA-256
# of recipe and data) and its own draw of images; comparisons are paired over the models.
# Usage: docs/results/model_seeds_runs.sh STREAM
#   (STREAM: mnist5k | shapes | mnist-super | vgg: the VGG-11-BN of shapes:64, 4 epochs each)
# Each evaluation runs on one torch thread; two streams side by side fit a 2-core machine.
set -euo pipefail
cd "$(dirname "$0")/../.."
export OMP_NUM_THREADS=1
SEEDS=${SEEDS:-5}
CACHE=${MODEL_CACHE:-$HOME/.cache/repinterp/models}
OUT=docs/results
CAMS=Grad-CAM,Grad-CAM++,Score-CAM
CONTROLS=RI+score,Grad-CAM+class,Score-CAM+class,Score-CAM+cluster
run() {  # NAME ARGS...: one evaluation, timed, into docs/results/NAME
    local name=$1; shift
    local start=$SECONDS
    python -m repinterp evaluate "$@" --model-seeds "$SEEDS" --model-cache "$CACHE" \
        --seed 0 --quiet --out "$OUT/$name" --overwrite
    echo "$name: $((SECONDS - start)) s" | tee -a "$OUT/model-seeds-times.txt"
}
case ${1:?stream} in
mnist5k)
    run mnist5k-unseen-seeds --dataset mnist5k --protocol unseen --methods RI,$CAMS,$CONTROLS
    run mnist5k-sanity-seeds --dataset mnist5k --protocol sanity
    run mnist5k-reference-seeds --dataset mnist5k --protocol reference --inputs 100 \
        --methods RI,Grad-CAM,Score-CAM,RI+score,Score-CAM+class,Score-CAM+cluster
    ;;
shapes)
    run shapes-unseen-seeds --dataset shapes --protocol unseen --methods RI,$CAMS,$CONTROLS
    run shapes-sanity-seeds --dataset shapes --protocol sanity
    run shapes-reference-seeds --dataset shapes --protocol reference --inputs 50 \
        --methods RI,Grad-CAM,Score-CAM,RI+score,Score-CAM+class,Score-CAM+cluster
    ;;
vgg)  # the last conv ReLU (4 x 4), as the earlier VGG runs; the CLI's default at 64 px is 8 x 8
    run shapes64-vgg11bn-seeds5 --dataset shapes:64 --protocol unseen --layer features.27 \
        --methods RI,Grad-CAM,Score-CAM,Grad-CAM+class --metrics ROAD,deletion,insertion \
        --curve-images 30
    ;;
mnist-super)
    run mnist-super-unseen-seeds --dataset mnist-super --protocol unseen \
        --methods RI,RI+logic,Grad-CAM,Score-CAM,Grad-CAM+class
    ;;
*) echo "unknown stream $1" >&2; exit 2 ;;
esac
