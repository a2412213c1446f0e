#!/usr/bin/env bash
# test.sh - install what is missing, build, and run the whole test suite (ctest).
# The tests read the fixtures under tests/data. Those that need the whole NeuSight dataset
# (ctest label shared-data) run when NEUSIGHT_DATASET names its neusight-data folder, set here
# to ../shared/neusight-data when that exists; otherwise they are skipped and ctest ends with
# one line saying how many.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -z "${NEUSIGHT_DATASET:-}" ] && [ -d ../shared/neusight-data ]; then
  NEUSIGHT_DATASET=$(cd ../shared/neusight-data && pwd)
  export NEUSIGHT_DATASET
fi
scripts/build.sh
# chromium (HTML report) and onnxruntime-node (annotated ONNX) for the report tests.
scripts/install_test_deps.sh
cd "${BUILD_DIR:-build}"
ctest --output-on-failure -j "$(nproc)" "$@"
