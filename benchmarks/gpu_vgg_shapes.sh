#!/usr/bin/env bash
# Issue 15 §4b on a lent GPU: train a VGG on shapes at 224 px and evaluate it; see the docstring
# of benchmarks/gpu_vgg_shapes.py for the environment it reads and the files it writes to $OUT.
# Run from the repository root. Wheels carried in .whl/ (grad-cam, ttach) are installed first.
set -euo pipefail
: "${OUT:?set OUT to the output folder}"
. benchmarks/gpu_env.sh
if [ -n "$(ls -A "$OUT" 2>/dev/null)" ]; then
    echo "gpu_vgg_shapes: error: $OUT is not empty; give an empty or new folder" >&2
    exit 2
fi
mkdir -p "$OUT"
"$PYTHON" benchmarks/gpu_vgg_shapes.py 2>&1 | tee "$OUT/log.txt"
