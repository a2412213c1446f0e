#!/usr/bin/env bash
# ci_fuzz.sh - fuzz load, shape inference, lowering, tiling and prediction for a bounded time
# (FUZZ_SECONDS, default 90) on the seed corpus built from the project's own models, then the
# readers of configs, device JSONs and kernels CSVs (FUZZ_INPUT_SECONDS, default 45).
# Uses the clang + ASan + UBSan + libFuzzer build of scripts/ci_sanitize.sh (built here when
# missing). Exits non-zero when the fuzzer finds a crash, leak, timeout or sanitizer report;
# the reproducer is kept in $BUILD_DIR/fuzz-artifacts/ and its path printed.
#   scripts/ci_fuzz.sh                       # 90 s
#   FUZZ_SECONDS=600 scripts/ci_fuzz.sh      # longer, by hand
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${SANITIZE_BUILD_DIR:-build-sanitize}
SECONDS_BUDGET=${FUZZ_SECONDS:-90}
INPUT_SECONDS=${FUZZ_INPUT_SECONDS:-45}
if [ ! -x "$BUILD_DIR/bin/neusight_fuzz" ] || [ ! -x "$BUILD_DIR/bin/neusight_fuzz_inputs" ] ||
   [ ! -f "$BUILD_DIR/fuzz/seeds.stamp" ] || [ ! -f "$BUILD_DIR/fuzz/input-seeds.stamp" ]; then
  SANITIZE_BUILD_DIR=$BUILD_DIR scripts/ci_sanitize.sh -R '^fuzz/'
fi
export NEUSIGHT_DATA_DIR=$PWD/$BUILD_DIR/data
export ASAN_OPTIONS=${ASAN_OPTIONS:-exitcode=86:detect_leaks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
# fuzz TARGET SECONDS SEEDS REGRESSIONS: new inputs go to a fresh work folder; the seeds (and
# past regressions) are read-only starting points. -max_len keeps every tiny seed whole (the
# two big exports are cut: truncation paths).
fuzz() {
  local target=$1 budget=$2 seeds=$3 regressions=$4
  local work="$BUILD_DIR/$target-work" artifacts="$BUILD_DIR/fuzz-artifacts" log="$BUILD_DIR/$target.log" status=0
  rm -rf "$work"
  mkdir -p "$work" "$artifacts"
  "$BUILD_DIR/bin/$target" "$work" "$seeds" "$regressions" \
    -max_total_time="$budget" -timeout=20 -rss_limit_mb=2048 -max_len=40000 \
    -artifact_prefix="$artifacts/" -print_final_stats=1 >"$log" 2>&1 || status=$?
  tail -n 25 "$log" >&2
  if [ "$status" -ne 0 ]; then
    echo "ci_fuzz: $target found a failure (exit $status); reproducer(s):" >&2
    ls -1 "$artifacts" >&2
    echo "replay: $BUILD_DIR/bin/$target $artifacts/<file>" >&2
    exit 1
  fi
  echo "ci_fuzz: $target: no failure in ${budget}s ($(ls "$work" | wc -l) new corpus inputs)" >&2
}
fuzz neusight_fuzz "$SECONDS_BUDGET" "$BUILD_DIR/fuzz/seeds" fuzz/regressions
fuzz neusight_fuzz_inputs "$INPUT_SECONDS" "$BUILD_DIR/fuzz/input-seeds" fuzz/regressions-inputs
