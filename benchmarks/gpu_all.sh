#!/usr/bin/env bash
# Every GPU check of the project in one time-bounded run, most important first, for a lent GPU:
#   1. CPU and CUDA give the same explanations (tests/runtime/test_cuda.py, the cover's CUDA paths);
#   2. explain latency at |R| = 10k, 100k, 1M against one forward pass (bench_explain.py);
#   3. fit / forward of VGG-19 at 224 px (bench_engine.py);
#   4. a VGG trained on shapes at 224 px, then `coverage` and `unseen` on it (gpu_vgg_shapes.py);
#   5. reused heat maps against pytorch-grad-cam on VGG-19 at 224 px (bench_heatmap.py).
# Each step has its own time limit; after each, everything measured so far is packed into
# $OUT/results.tar (the device tool returns few files), so a run cut short still returns what it
# measured. Run from the repository root:
#   OUT=/some/empty/folder bash benchmarks/gpu_all.sh
# Wheels carried in .whl/ (grad-cam and ttach, for the CAM baselines) are installed first.
# SMOKE=1 DEVICE=cpu runs every step at a tiny size, to try the script on a CPU first.
set -uo pipefail
: "${OUT:?set OUT to the output folder}"
. benchmarks/gpu_env.sh
RES=$(mktemp -d /tmp/gpu-results-XXXX)
mkdir -p "$OUT"
log="$RES/log.txt"
step() {  # step SECONDS NAME COMMAND...: run with a time limit, log it, pack, never stop the script
    local seconds=$1 name=$2
    shift 2
    echo "=== $name ($(date +%T), limit ${seconds}s)" | tee -a "$log"
    timeout "$seconds" "$@" 2>&1 | tee -a "$log"
    echo "=== $name: exit ${PIPESTATUS[0]}" | tee -a "$log"
    tar cf "$OUT/results.tar" -C "$RES" .
}
DEVICE=${DEVICE:-cuda}
if [ "${SMOKE:-0}" = 1 ]; then
    SIZES=2000,4000 N_VGG=16 VGG_SIZE=32 N_SMALL=500 N_HEAT=32 HEAT_SIZE=32
    export SHAPES_SIZE=32 MODEL=vgg11_bn N_TRAIN=200 N_UNSEEN=100 EPOCHS=1 RUNS=1 TOTAL_SECONDS=150
else
    SIZES=10000,100000,1000000 N_VGG=2000 VGG_SIZE=224 N_SMALL=20000 N_HEAT=1000 HEAT_SIZE=224
fi
"$PYTHON" -c "import torch; print(torch.__version__, torch.cuda.is_available() and torch.cuda.get_device_name())" | tee -a "$log"

step "${CUDA_TESTS_S:-90}" cuda-tests "$PYTHON" -m pytest -q -s -p no:cacheprovider \
    tests/runtime/test_cuda.py tests/core/test_cover_equivalence.py tests/evaluation/test_protocols.py -k "cuda or device"
step "${EXPLAIN_S:-60}" explain "$PYTHON" benchmarks/bench_explain.py --device "$DEVICE" \
    --sizes "$SIZES" --n-single 30 --n-inputs 1000 --threads 8 \
    --out "$RES/explain_cuda.json"
step "${ENGINE_S:-60}" engine "$PYTHON" benchmarks/bench_engine.py --device "$DEVICE" \
    --vgg vgg19 --vgg-size "$VGG_SIZE" --n-vgg "$N_VGG" --vgg-repeats 3 --n-small "$N_SMALL" \
    --repeats 3 --threads 8 \
    --out "$RES/engine_cuda.json"
mkdir -p "$RES/vgg"
step "${VGG_S:-200}" vgg-shapes env OUT="$RES/vgg" DEVICE="$DEVICE" \
    TOTAL_SECONDS="${TOTAL_SECONDS:-190}" "$PYTHON" benchmarks/gpu_vgg_shapes.py
step "${HEATMAP_S:-60}" heatmap "$PYTHON" benchmarks/bench_heatmap.py --device "$DEVICE" \
    --vgg vgg19 --size "$HEAT_SIZE" --n-unseen "$N_HEAT" --n-reference "$N_HEAT" --regions 20 \
    --n-score-cam 4 --threads 8 \
    --out "$RES/heatmap_cuda.json"
echo "=== done ($(date +%T))" | tee -a "$log"
tar cf "$OUT/results.tar" -C "$RES" .
