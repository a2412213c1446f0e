#!/usr/bin/env bash
# ci_fuzz.sh - fuzz load, shape inference, lowering, tiling and prediction for a bounded time
# (FUZZ_SECONDS, default 90) on the seed corpus built from the project's own models.
# Uses the clang + ASan + UBSan + libFuzzer build of scripts/ci_sanitize.sh (built here when
# missing). Exits non-zero when the fuzzer finds a crash, leak, timeout or sanitizer report;
# the reproducer is kept in $BUILD_DIR/fuzz-artifacts/ and its path printed.
#   scripts/ci_fuzz.sh                       # 90 s
#   FUZZ_SECONDS=600 scripts/ci_fuzz.sh      # longer, by hand
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${SANITIZE_BUILD_DIR:-build-sanitize}
SECONDS_BUDGET=${FUZZ_SECONDS:-90}
if [ ! -x "$BUILD_DIR/bin/neusight_fuzz" ] || [ ! -f "$BUILD_DIR/fuzz/seeds.stamp" ]; then
  SANITIZE_BUILD_DIR=$BUILD_DIR scripts/ci_sanitize.sh -R '^fuzz/'
fi
work="$BUILD_DIR/fuzz-work"
artifacts="$BUILD_DIR/fuzz-artifacts"
rm -rf "$work"
mkdir -p "$work" "$artifacts"
export NEUSIGHT_DATA_DIR=$PWD/$BUILD_DIR/data
export ASAN_OPTIONS=${ASAN_OPTIONS:-exitcode=86:detect_leaks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
# New inputs go to $work; the seeds (and past regressions) are read-only starting points.
# -max_len keeps every tiny seed whole (the two big exports are cut: truncation paths).
status=0
"$BUILD_DIR/bin/neusight_fuzz" "$work" "$BUILD_DIR/fuzz/seeds" fuzz/regressions \
  -max_total_time="$SECONDS_BUDGET" -timeout=20 -rss_limit_mb=2048 -max_len=40000 \
  -artifact_prefix="$artifacts/" -print_final_stats=1 >"$BUILD_DIR/fuzz.log" 2>&1 || status=$?
tail -n 25 "$BUILD_DIR/fuzz.log" >&2
if [ "$status" -ne 0 ]; then
  echo "ci_fuzz: the fuzzer found a failure (exit $status); reproducer(s):" >&2
  ls -1 "$artifacts" >&2
  echo "replay: $BUILD_DIR/bin/neusight_fuzz $artifacts/<file>" >&2
  exit 1
fi
echo "ci_fuzz: no failure in ${SECONDS_BUDGET}s ($(ls "$work" | wc -l) new corpus inputs)" >&2
