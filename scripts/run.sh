#!/usr/bin/env bash
# run.sh - build (if needed) and run neusight-onnx with the given arguments.
#   scripts/run.sh build/examples/gpt2-small.onnx --gpu b200 --batch 1 --seq 1024
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/build.sh >/dev/null 2>&1 || scripts/build.sh
exec "${BUILD_DIR:-build}/bin/neusight-onnx" "$@"
