#!/usr/bin/env bash
# install_deps.sh - install the Debian packages neusight-onnx needs (idempotent; one apt-get
# update only when something is missing; no other network).
set -euo pipefail
PACKAGES=(cmake ninja-build g++ pkg-config
          libonnx-dev libprotobuf-dev protobuf-compiler
          libxtensor-dev libxtensor-blas-dev libopenblas-dev
          nlohmann-json3-dev doctest-dev python3 python3-onnx python3-dev pybind11-dev)
# Extra packages a caller needs on top (scripts/ci_sanitize.sh: clang libclang-rt-14-dev).
PACKAGES+=("$@")
missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
echo "installing: ${missing[*]}" >&2
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
