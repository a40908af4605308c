#!/usr/bin/env bash
# SPLASH's attention kernels next to FlashInfer's MLA decode and cuDNN's fused prefill, on identical
# shapes in one device call, printed as one table with the speed ratio per point (issue 17):
#
#   bash scripts/peer_bench.sh prepare   # HERE: downloads the peer wheels into .peer-wheels (and the device script's folders)
#   bash scripts/peer_bench.sh           # THERE, in one `run` call with carry [".device-deps", ".device-fixtures", ".peer-wheels"]
#
# The device machine has no network, so the wheels travel with the call: FlashInfer (pure Python; it
# compiles its kernels with the device's nvcc on first use) and the dependencies it imports, for the
# device's Python 3.12. FlashMLA has no wheel of its own; sgl-kernel's (which holds it) is over 500 MB,
# past what one call carries (64 MiB), so FlashMLA is not among the peers. cuDNN comes with the device's
# PyTorch.
set -euo pipefail
cd "$(dirname "$0")/.."
FLASHINFER=${SPLASH_FLASHINFER:-flashinfer-python==0.6.13}
if [ "${1:-}" = prepare ]; then
  bash scripts/device.sh prepare
  grep -qxF /.peer-wheels/ .git/info/exclude || echo /.peer-wheels/ >> .git/info/exclude
  rm -rf .peer-wheels && mkdir -p .peer-wheels
  # --no-deps throughout: only what `import flashinfer` and its MLA path need (torch, numpy and requests are on the device).
  for p in "$FLASHINFER" "apache-tvm-ffi>=0.1.6,<0.2,!=0.1.8,!=0.1.8.post0" einops ninja tabulate nvidia-ml-py click tqdm \
           "packaging>=24.2" "nvidia-cudnn-frontend>=1.13.0"; do
    python3 -m pip download -q --no-deps -d .peer-wheels --only-binary=:all: --python-version 3.12 \
      --platform manylinux_2_28_x86_64 --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 "$p"
  done
  du -sh .peer-wheels .device-deps .device-fixtures
  exit 0
fi
SPLASH_STAGES="build attention peer" exec bash scripts/device.sh
