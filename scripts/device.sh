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
      libgtest-dev libgmock-dev libcpp-httplib-dev libcpp-httplib0.11 libbrotli1 libbrotli-dev libssl-dev zlib1g-dev pkgconf pkgconf-bin libpkgconf3)
DEV_PKGS=(nlohmann-json3-dev libcli11-dev libfmt-dev libspdlog-dev libonig-dev libgtest-dev libcpp-httplib-dev)

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
export SPLASH_FIXTURES_DIR=$ROOT/.device-fixtures
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
TESTS=(timeout 240 "./$BUILD/splash_cuda_tests")
[ "${SPLASH_SANITIZE:-0}" = 1 ] && TESTS=(compute-sanitizer --tool memcheck "${TESTS[@]}")
"${TESTS[@]}" > "$OUT/cuda_tests.log" 2>&1
rc=$?
grep -E '^\[  (FAILED|PASSED|SKIPPED) |Failure|error:|Expected|Which is|max abs error|element' "$OUT/cuda_tests.log" | head -60
passed=$(grep -E '^\[  PASSED  \]' "$OUT/cuda_tests.log" | tail -1)
failed=$(grep -cE '^\[  FAILED  \] CudaOps' "$OUT/cuda_tests.log")
row "splash_cuda_tests" "rc=$rc ${passed#\[  PASSED  \] } ${failed} failed ($((SECONDS - t0)) s)"

# End to end: logits and greedy continuations against transformers' reference, both MLA forms, bf16
# tolerance; a greedy mismatch is tolerated only where the reference margin is below 0.05.
FIX=.device-fixtures/tiny-mla-a
check() {  # name, extra args
  local name=$1; shift
  t0=$SECONDS
  timeout 90 ./$BUILD/splash check --model $FIX --backend cuda --greedy-margin 0.05 --max-outliers 0.05 --log-level warn "$@" > "$OUT/check_$name.log" 2>&1
  local rc=$?
  tail -9 "$OUT/check_$name.log"
  row "check $name" "rc=$rc $(grep -E 'PASS|FAIL' "$OUT/check_$name.log" | tail -1 | cut -c1-60) ($((SECONDS - t0)) s)"
}
check T1_auto
check T1_absorbed_chunk7 --attn-form absorbed --prefill-chunk 7
GPUS=$(nvidia-smi -L | wc -l)
if [ "$GPUS" -ge 2 ]; then
  for l in tp dp cp dop; do check "T2_$l" --ranks 2 --attn-layout $l --prefill-chunk 7; done
  # A walk through all 12 switch directions under load, overlapped and blocking.
  WALK='step=3:dp,step=11:cp,step=19:dop,step=27:tp,step=35:cp,step=43:dp,step=51:dop,step=59:cp,step=67:tp,step=75:dop,step=83:dp,step=91:tp'
  check T2_switch_walk_overlapped --ranks 2 --attn-layout tp --prefill-chunk 7 --switch "$WALK"
  check T2_switch_walk_blocking --ranks 2 --attn-layout tp --prefill-chunk 7 --switch "$WALK" --switch-mode blocking
fi

# Batch invariance of greedy decoding: the fixture prompts batched and one at a time give the same tokens.
python3 - "$FIX" > "$OUT/fixture_prompts.jsonl" <<'PY'
import json, struct, sys
f = open(sys.argv[1] + "/reference.safetensors", "rb"); n = struct.unpack("<Q", f.read(8))[0]; h = json.loads(f.read(n))
for k in sorted(int(x[1:].split(".")[0]) for x in h if x.endswith(".input_ids")):
    m = h[f"p{k}.input_ids"]; f.seek(8 + n + m["data_offsets"][0])
    ids = list(struct.unpack(f"<{m['shape'][0]}q", f.read(8 * m["shape"][0])))
    print(json.dumps({"input_ids": ids, "max_tokens": 24, "temperature": 0, "ignore_eos": True}))
PY
for mode in batched single; do
  extra=(); [ $mode = single ] && extra=(--max-running-requests 1)
  timeout 90 ./$BUILD/splash generate --model $FIX --backend cuda --input "$OUT/fixture_prompts.jsonl" \
    --output "$OUT/gen_$mode.jsonl" --log-level warn "${extra[@]}" 2> "$OUT/gen_$mode.log"
done
python3 - "$OUT/gen_batched.jsonl" "$OUT/gen_single.jsonl" > "$OUT/batch_invariance.txt" <<'PY'
import json, sys
a = [json.loads(l)["output_ids"] for l in open(sys.argv[1])]; b = [json.loads(l)["output_ids"] for l in open(sys.argv[2])]
print(f"{sum(x == y for x, y in zip(a, b))}/{len(a)} prompts identical batched vs one at a time")
PY
row "greedy batch invariance (cuda)" "$(cat "$OUT/batch_invariance.txt")"

# ---- Benchmarks hook: add bench runs below this line (each adds a row: row "name" "result"). ----

# The backend's heavy ops at DeepSeek-V3 sizes (GEMMs, MoE experts, memory-bound ops).
t0=$SECONDS
./$BUILD/splash_cuda_tests --gtest_also_run_disabled_tests --gtest_filter='*PerfReport*' > "$OUT/perf_ops.log" 2>&1
rc=$?
sed -n '/^op /,/^\[/p' "$OUT/perf_ops.log"
row "op throughput (perf_ops.log)" "rc=$rc ($((SECONDS - t0)) s)"

# Attention kernels against the hardware's limits measured in the same run (copy bandwidth, GEMM).
if [ -x ./$BUILD/splash_bench_attention ] || cmake --build "$BUILD" -j "$JOBS" --target splash_bench_attention >> "$OUT/build.log" 2>&1; then
  t0=$SECONDS
  timeout 240 ./$BUILD/splash_bench_attention > "$OUT/bench_attention.log" 2>&1
  row "bench attention (bench_attention.log)" "rc=$? ($((SECONDS - t0)) s)"
  tail -45 "$OUT/bench_attention.log"
fi

# ---- End of benchmarks. ----

echo
echo "================ device summary ($(head -1 "$OUT/gpu.txt")) ================"
printf '%s\n' "${ROWS[@]}"
