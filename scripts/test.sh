#!/usr/bin/env bash
# Installs, builds and runs every test (unit tests and end-to-end checks through ctest).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
python3 -m pip install -q -r tests/server/requirements.txt  # the server tests' client side (PyPI)
ctest --test-dir "${BUILD_DIR:-build}" --output-on-failure -j "$(nproc)"
