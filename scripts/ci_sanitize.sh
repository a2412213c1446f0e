#!/usr/bin/env bash
# ci_sanitize.sh - build the project with clang, AddressSanitizer + UndefinedBehaviorSanitizer
# and libFuzzer coverage into build-sanitize/ and run the test suite (unit, CLI, seed replay)
# under the sanitizers. Any sanitizer report fails the run. scripts/ci_fuzz.sh then fuzzes
# with the same build.
#   scripts/ci_sanitize.sh [extra ctest args]
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install_deps.sh clang libclang-rt-14-dev
BUILD_DIR=${SANITIZE_BUILD_DIR:-build-sanitize}
if [ ! -f "$BUILD_DIR/build.ninja" ]; then
  # -O1 keeps the sanitized suite fast; no NDEBUG so assertions stay live.
  CC=clang CXX=clang++ cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1" -DNEUSIGHT_SANITIZE=ON -DNEUSIGHT_FUZZ=ON \
    -DNEUSIGHT_BUILD_BENCH=OFF >/dev/null
fi
cmake --build "$BUILD_DIR" -j "$(nproc)" >&2
# A sanitizer report exits 86 (never mistaken for the CLI's own exit codes 1 and 2).
export ASAN_OPTIONS=${ASAN_OPTIONS:-exitcode=86:detect_leaks=1:abort_on_error=0:strict_string_checks=1:detect_stack_use_after_return=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
# The property tests draw a twentieth of their random kernels here (tests/unit/unit-invariants.cpp):
# the release suite checks the properties in full, this one looks for memory errors.
export NEUSIGHT_PROPERTY_KERNELS=${NEUSIGHT_PROPERTY_KERNELS:-16}
cd "$BUILD_DIR"
# Left to the release suite (scripts/test.sh): install/consumer (an uninstrumented consumer of
# the install); the CLI modules that run the generation, config-model, precision, LoRA and
# multi-GPU code over dozens of models (6x their release time here, 980 of this suite's 1,900
# CPU seconds; the unit suite runs that code under the sanitizers, the other CLI modules the
# CLI's own); and the fuzz seed replays, which scripts/ci_fuzz.sh runs first with this build.
# Asked for tests (-R ...) run as asked.
exclude='^(install/|fuzz/|cli/test_(generate|config_models|precision|lora|parallel)$)'
if [ "$#" -gt 0 ]; then exclude='^install/'; fi
ctest --output-on-failure -j "$(nproc)" -E "$exclude" "$@"
