#!/usr/bin/env bash
# Installs what a fresh Debian 12 machine lacks to build SPLASH (Debian packages only), then configures
# and builds. Idempotent: skips apt when everything is present.
set -euo pipefail
cd "$(dirname "$0")/.."
PKGS=(build-essential cmake ninja-build pkg-config nlohmann-json3-dev libcli11-dev libfmt-dev libspdlog-dev
      libcpp-httplib-dev libssl-dev zlib1g-dev libbrotli-dev libonig-dev libgtest-dev libgmock-dev python3 python3-pip
      libopenmpi-dev openmpi-bin)
missing=()
for p in "${PKGS[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing: ${missing[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi
BUILD_DIR=${BUILD_DIR:-build}
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release ${SPLASH_CMAKE_ARGS:-} >/dev/null
cmake --build "$BUILD_DIR" -j "$(nproc)"
