#!/usr/bin/env bash
# run.sh - install the build tree into a temporary prefix and build/run the consumer against it;
# with a Python interpreter as second argument, also import the installed Python module.
set -euo pipefail
build_dir=$1
python=${2:-}
src_dir=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cmake --install "$build_dir" --prefix "$tmp/prefix" >/dev/null
cmake -S "$src_dir" -B "$tmp/build" -G Ninja -DCMAKE_PREFIX_PATH="$tmp/prefix" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$tmp/build" >/dev/null
# The installed tool finds its data in <prefix>/share/neusight.
out=$(env -u NEUSIGHT_DATA_DIR "$tmp/build/consumer" "$build_dir/examples/gpt2-small.onnx" b200)
echo "$out"
case "$out" in "NVIDIA B200 "*" $tmp/prefix/share/neusight") ;; *) echo "unexpected output: $out" >&2; exit 1 ;; esac
# The listing whole, then searched: `grep -q` would stop reading at the match and, under
# pipefail, fail the pipeline on the writer's broken pipe.
gpus=$("$tmp/prefix/bin/neusight-onnx" gpus)
grep -q "NVIDIA B200" <<<"$gpus"
if [ -n "$python" ]; then
  module=$(find "$tmp/prefix" -name 'neusight_onnx*.so' | head -n 1)
  [ -n "$module" ] || { echo "the Python module was not installed" >&2; exit 1; }
  (cd "$tmp" && env -u NEUSIGHT_DATA_DIR PYTHONPATH="$(dirname "$module")" "$python" -c '
import sys, neusight_onnx as n
assert n.data_dir == sys.argv[1], (n.data_dir, sys.argv[1])
r = n.analyze(sys.argv[2], "b200", batch=1, seq=16)
print("python module:", n.__file__, r["gpu"], r["e2e_latency_ms"])
' "$tmp/prefix/share/neusight" "$build_dir/examples/gpt2-small.onnx")
fi
