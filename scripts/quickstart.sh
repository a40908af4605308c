#!/usr/bin/env bash
# Installs what is missing, builds, and runs the main job: `splash generate` on the built-in tiny
# DeepSeek-V3-architecture model (dummy weights), CPU backend, 4 ranks, a mixed workload of 24
# requests that switches attention layout while they run.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
./build/splash generate --model builtin:tiny --ranks 4 --attn-layout tp --demo 24 --output /dev/null \
  --switch 'step=4:dop,step=10:dp,step=16:cp,step=24:tp' "$@"
