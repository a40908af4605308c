#!/usr/bin/env bash
# Builds SPLASH with CUDA on the device machine, runs the CUDA op tests and the end-to-end check on the
# fixture, and prints a summary table last. Two modes:
#
#   bash scripts/device.sh prepare   # HERE, before the call: fills the two carried folders
#   bash scripts/device.sh           # THERE, in one `run` call with carry [".device-deps", ".device-fixtures"]
#
# The device machine has no network: the fixture (../shared is not carried) travels in
# .device-fixtures/, and the build dependencies it may lack travel as Debian 12 .debs in .device-deps/,
# unpacked with dpkg -x into a private prefix (never into /) and used only when the system lacks one.
# Logs land in $OUT (what comes back from the call).
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
DEBS=(nlohmann-json3-dev libcli11-dev libfmt-dev libfmt9 libspdlog-dev libspdlog1.10 libonig-dev libonig5
      libgtest-dev libgmock-dev libcpp-httplib-dev libcpp-httplib0.11 pkgconf pkgconf-bin libpkgconf3)
DEV_PKGS=(nlohmann-json3-dev libcli11-dev libfmt-dev libspdlog-dev libonig-dev libgtest-dev)

if [ "${1:-}" = prepare ]; then
  set -e
  mkdir -p .git/info .device-deps .device-fixtures
  for d in /.device-deps/ /.device-fixtures/; do grep -qxF "$d" .git/info/exclude 2>/dev/null || echo "$d" >> .git/info/exclude; done
  rm -rf .device-fixtures/tiny-mla-a
  cp -r ../shared/fixtures/tiny-mla-a .device-fixtures/
  (cd .device-deps && apt-get download "${DEBS[@]}" 2>&1 | grep -v '^W: Download is performed unsandboxed' || true)
  du -sh .device-deps .device-fixtures
  exit 0
fi

export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
OUT=${OUT:-$ROOT/build-device/out}
mkdir -p "$OUT"
BUILD=build-device
JOBS=$(nproc)
declare -a ROWS
row() { ROWS+=("$(printf '%-34s %s' "$1" "$2")"); }

nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | tee "$OUT/gpu.txt"
echo "--- build dependencies present on this machine:"
dpkg -l 2>/dev/null | grep -E 'nlohmann|cli11|libfmt|spdlog|onig|gtest|gmock|pkgconf|pkg-config' | awk '{print $2, $3}'

# Dependencies: the system's where all are installed, else the carried .debs in a private prefix.
CMAKE_ARGS=(-DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90a -DCMAKE_POLICY_VERSION_MINIMUM=3.5)
missing=()
for p in "${DEV_PKGS[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
  echo "--- missing: ${missing[*]}; using the carried Debian 12 packages"
  if ! ls .device-deps/*.deb >/dev/null 2>&1; then
    echo "no .device-deps/*.deb: run 'bash scripts/device.sh prepare' here and carry .device-deps"; exit 2
  fi
  P=/tmp/splash-deps
  rm -rf "$P" && mkdir -p "$P"
  for f in .device-deps/*.deb; do dpkg -x "$f" "$P"; done
  LIBDIR=$P/usr/lib/x86_64-linux-gnu
  CMAKE_ARGS+=(-DCMAKE_PREFIX_PATH="$P/usr")
  # The .pc files say prefix=/usr; the sysroot maps their -I/-L into the prefix (only oniguruma is
  # found through pkg-config).
  export PKG_CONFIG_PATH=$LIBDIR/pkgconfig PKG_CONFIG_SYSROOT_DIR=$P
  # libspdlog needs libfmt at run time, also while the build runs test binaries to list their tests.
  export LD_LIBRARY_PATH=$LIBDIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  command -v pkg-config >/dev/null || CMAKE_ARGS+=(-DPKG_CONFIG_EXECUTABLE="$P/usr/bin/pkgconf")
fi

t0=$SECONDS
if cmake -S . -B "$BUILD" -G Ninja "${CMAKE_ARGS[@]}" > "$OUT/configure.log" 2>&1 &&
   cmake --build "$BUILD" -j "$JOBS" --target splash splash_cuda_tests > "$OUT/build.log" 2>&1; then
  row "build (cmake + ninja)" "ok, $((SECONDS - t0)) s"
else
  tail -40 "$OUT/configure.log" "$OUT/build.log"
  grep -E 'error|FAILED' "$OUT/build.log" | head -30
  row "build (cmake + ninja)" "FAILED (see configure.log / build.log)"
  printf '%s\n' "${ROWS[@]}"
  exit 1
fi

# CUDA op tests (SPLASH_SANITIZE=1 runs them under compute-sanitizer's memcheck instead).
t0=$SECONDS
TESTS=("./$BUILD/splash_cuda_tests")
[ "${SPLASH_SANITIZE:-0}" = 1 ] && TESTS=(compute-sanitizer --tool memcheck "${TESTS[@]}")
"${TESTS[@]}" > "$OUT/cuda_tests.log" 2>&1
rc=$?
grep -E '^\[  (FAILED|PASSED|SKIPPED) |Failure|error:|Expected|Which is|max abs error|element' "$OUT/cuda_tests.log" | head -60
passed=$(grep -E '^\[  PASSED  \]' "$OUT/cuda_tests.log" | tail -1)
failed=$(grep -cE '^\[  FAILED  \] CudaOps' "$OUT/cuda_tests.log")
row "splash_cuda_tests" "rc=$rc ${passed#\[  PASSED  \] } ${failed} failed ($((SECONDS - t0)) s)"

# End to end: logits and greedy continuations against transformers' reference, both MLA forms.
for form in auto absorbed; do
  t0=$SECONDS
  ./$BUILD/splash check --model .device-fixtures/tiny-mla-a --backend cuda --attn-form "$form" \
    > "$OUT/check_$form.log" 2>&1
  rc=$?
  tail -12 "$OUT/check_$form.log"
  row "splash check cuda form=$form" "rc=$rc $(grep -E 'PASS|FAIL' "$OUT/check_$form.log" | tail -1) ($((SECONDS - t0)) s)"
done

# ---- Benchmarks hook: add bench runs below this line (each adds a row: row "name" "result"). ----

# The backend's heavy ops at DeepSeek-V3 sizes (GEMMs, MoE experts, memory-bound ops).
t0=$SECONDS
./$BUILD/splash_cuda_tests --gtest_also_run_disabled_tests --gtest_filter='*PerfReport*' > "$OUT/perf_ops.log" 2>&1
rc=$?
sed -n '/^op /,/^\[/p' "$OUT/perf_ops.log"
row "op throughput (perf_ops.log)" "rc=$rc ($((SECONDS - t0)) s)"

# ---- End of benchmarks. ----

echo
echo "================ device summary ($(head -1 "$OUT/gpu.txt")) ================"
printf '%s\n' "${ROWS[@]}"
