#!/usr/bin/env bash
# install_test_deps.sh - install what the report tests need beyond the build: Debian's
# headless `chromium` (renders the HTML report) and the npm package `onnxruntime-node`
# (loads the annotated ONNX model). Idempotent; installs only what is missing.
#
# onnxruntime-node goes into a cache folder outside the repo (NEUSIGHT_NODE_DIR, default
# ~/.cache/neusight-test-deps); its CPU runtime ships inside the package, so the install
# script (which would download CUDA parts) is skipped. Prints nothing on success when all
# is present. A failure here does not stop the suite: the tests that need the tool report it.
set -uo pipefail
NODE_DIR=${NEUSIGHT_NODE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/neusight-test-deps}
ORT_VERSION=${NEUSIGHT_ORT_VERSION:-1.20.1}

SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive

missing=()
for p in chromium nodejs npm fonts-dejavu-core; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# A node/npm that did not come from Debian (e.g. nodesource) is fine too.
if command -v node >/dev/null && command -v npm >/dev/null; then
  missing=("${missing[@]/nodejs/}"); missing=("${missing[@]/npm/}")
fi
pkgs=()
for p in "${missing[@]}"; do [ -n "$p" ] && pkgs+=("$p"); done
if [ ${#pkgs[@]} -gt 0 ]; then
  echo "install_test_deps: installing ${pkgs[*]}" >&2
  $SUDO apt-get -o DPkg::Lock::Timeout=600 update -qq &&
    $SUDO apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends "${pkgs[@]}" >/dev/null ||
    echo "install_test_deps: apt-get install ${pkgs[*]} failed" >&2
fi

if command -v npm >/dev/null && [ ! -f "$NODE_DIR/node_modules/onnxruntime-node/package.json" ]; then
  echo "install_test_deps: npm install onnxruntime-node@$ORT_VERSION into $NODE_DIR" >&2
  mkdir -p "$NODE_DIR"
  [ -f "$NODE_DIR/package.json" ] || echo '{"name":"neusight-test-deps","private":true}' >"$NODE_DIR/package.json"
  (cd "$NODE_DIR" && npm install --ignore-scripts --no-audit --no-fund --silent "onnxruntime-node@$ORT_VERSION") ||
    echo "install_test_deps: npm install onnxruntime-node failed" >&2
fi
exit 0
