#!/usr/bin/env bash
# test.sh - install what is missing, build, and run the whole test suite (ctest).
# The tests read the fixtures under tests/data. Those that need the whole NeuSight dataset
# (ctest label shared-data) run when NEUSIGHT_DATASET names its neusight-data folder, which is
# set here to ../shared/neusight-data when that exists; without it they are left out and one
# line says how many.
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
if [ -n "${NEUSIGHT_DATASET:-}" ] && [ -d "$NEUSIGHT_DATASET/kernels" ]; then
  ctest --output-on-failure -j "$(nproc)" "$@"
else
  ctest --output-on-failure -j "$(nproc)" -LE shared-data "$@"
  skipped=$(ctest -N -L shared-data "$@" | sed -n 's/^Total Tests: //p')
  echo "test.sh: skipped ${skipped:-0} tests that need the whole dataset (label shared-data; set NEUSIGHT_DATASET to the neusight-data folder to run them)"
fi
