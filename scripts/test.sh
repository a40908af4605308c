#!/usr/bin/env bash
# Installs, builds and runs every test (unit tests and end-to-end checks through ctest).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# The server tests' client side (PyPI). Debian's own python3 takes packages only when told it may
# (PEP 668); a pyenv or virtualenv python takes them as is.
python3 -m pip install -q -r tests/server/requirements.txt 2>/dev/null ||
  python3 -m pip install -q --break-system-packages -r tests/server/requirements.txt
ctest --test-dir "${BUILD_DIR:-build}" --output-on-failure -j "$(nproc)"
