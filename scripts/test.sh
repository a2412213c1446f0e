#!/usr/bin/env bash
# test.sh - install what is missing, build, and run the whole test suite (ctest).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/build.sh
cd "${BUILD_DIR:-build}"
ctest --output-on-failure -j "$(nproc)" "$@"
