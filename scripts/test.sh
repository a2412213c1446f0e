#!/usr/bin/env bash
# test.sh - install what is missing, build, and run the whole test suite (ctest).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/build.sh
# chromium (HTML report) and onnxruntime-node (annotated ONNX) for the report tests.
scripts/install_test_deps.sh
cd "${BUILD_DIR:-build}"
ctest --output-on-failure -j "$(nproc)" "$@"
