#!/usr/bin/env bash
# Builds SPLASH with CUDA on the device machine, runs the CUDA op tests and the end-to-end check on the
# fixture, and prints a summary table last. Two modes:
#
#   bash scripts/device.sh prepare   # HERE, before the call: fills the two carried folders
#   bash scripts/device.sh           # THERE, in one `run` call with carry [".device-deps", ".device-fixtures"]
#
# SPLASH_STAGES picks what runs (default: all, in this order): build tests checks shapes onegpu prefix rl
# sanitize multinode ops attention peer calibrate scheduler e2e e2e_fp8w profile traces switch layouts. The benchmark sizes follow the issues; SPLASH_QUICK=1 shrinks them for a smoke run.
# SPLASH_RANKS=T sets the ranks of the multi-GPU checks and benchmarks (default: every GPU).
#
# The device machine has no network: the fixture (../shared is not carried) travels in
# .device-fixtures/, and the build dependencies it may lack travel as Debian 12 .debs in .device-deps/,
# unpacked with dpkg -x into a private prefix (never into /) and used only when the system lacks one.
# Logs come back in $OUT/logs.tgz, the JSON results and summary.txt beside it.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
DEBS=(nlohmann-json3-dev libcli11-dev libfmt-dev libfmt9 libspdlog-dev libspdlog1.10 libonig-dev libonig5
      libgtest-dev libgmock-dev libcpp-httplib-dev libcpp-httplib0.11 libbrotli1 libbrotli-dev libssl-dev zlib1g-dev pkgconf pkgconf-bin libpkgconf3)
DEV_PKGS=(nlohmann-json3-dev libcli11-dev libfmt-dev libspdlog-dev libonig-dev libgtest-dev libcpp-httplib-dev)

if [ "${1:-}" = prepare ]; then
  set -e
  EXCLUDE=$(git rev-parse --git-path info/exclude)  # a worktree's .git is a file: ask git where
  mkdir -p "$(dirname "$EXCLUDE")" .device-deps .device-fixtures
  for d in /.device-deps/ /.device-fixtures/; do grep -qxF "$d" "$EXCLUDE" 2>/dev/null || echo "$d" >> "$EXCLUDE"; done
  rm -rf .device-fixtures/tiny-mla-a
  cp -r ../shared/fixtures/tiny-mla-a .device-fixtures/
  (cd .device-deps && apt-get download "${DEBS[@]}" 2>&1 | grep -v '^W: Download is performed unsandboxed' || true)
  du -sh .device-deps .device-fixtures
  exit 0
fi

export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export SPLASH_FIXTURES_DIR=$ROOT/.device-fixtures
OUT=${OUT:-$ROOT/build-device/out}
# The device tool returns at most 8 files: logs go to $LOG and come back as one archive; the JSON results
# and the summary are copied to $OUT at the end.
LOG=$ROOT/build-device/logs
rm -rf "$LOG" && mkdir -p "$OUT" "$LOG"
finish() {
  printf '%s\n' "${ROWS[@]}" > "$LOG/summary.txt"
  cp "$LOG"/*.json "$LOG/summary.txt" "$OUT/" 2>/dev/null
  tar czf "$OUT/logs.tgz" -C "$LOG" .
}
trap finish EXIT
BUILD=build-device
JOBS=$(nproc)
declare -a ROWS
row() { ROWS+=("$(printf '%-34s %s' "$1" "$2")"); }

nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | tee "$LOG/gpu.txt"
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

STAGES=${SPLASH_STAGES:-build tests checks shapes onegpu prefix rl sanitize multinode ops attention peer calibrate scheduler e2e e2e_fp8w profile traces switch layouts}
want() { [[ " $STAGES " == *" $1 "* ]]; }
QUICK=${SPLASH_QUICK:-0}
GPUS=$(nvidia-smi -L | wc -l)
T=${SPLASH_RANKS:-$GPUS}  # ranks of the multi-GPU stages: every GPU unless told

# ---- build ----
TARGETS=(splash splash_cuda_tests splash_bench_attention)
[ -f tests/multinode/splash_comm_check.cpp ] && TARGETS+=(splash_comm_check)
t0=$SECONDS
if cmake -S . -B "$BUILD" -G Ninja "${CMAKE_ARGS[@]}" > "$LOG/configure.log" 2>&1 &&
   cmake --build "$BUILD" -j "$JOBS" --target "${TARGETS[@]}" > "$LOG/build.log" 2>&1; then
  row "build (cmake + ninja)" "ok, $((SECONDS - t0)) s"
else
  tail -40 "$LOG/configure.log" "$LOG/build.log"
  grep -E 'error|FAILED' "$LOG/build.log" | head -30
  row "build (cmake + ninja)" "FAILED (see configure.log / build.log)"
  printf '%s\n' "${ROWS[@]}"
  exit 1
fi

# ---- tests: every CUDA op against the CPU backend (SPLASH_SANITIZE=1: under compute-sanitizer memcheck) ----
if want tests; then
  t0=$SECONDS
  TESTS=(timeout 300 "./$BUILD/splash_cuda_tests")
  [ "${SPLASH_SANITIZE:-0}" = 1 ] && TESTS=(compute-sanitizer --tool memcheck "${TESTS[@]}")
  "${TESTS[@]}" > "$LOG/cuda_tests.log" 2>&1
  rc=$?
  grep -E '^\[  (FAILED|PASSED|SKIPPED) |Failure|error:|Expected|Which is|max abs error|element' "$LOG/cuda_tests.log" | head -60
  passed=$(grep -E '^\[  PASSED  \]' "$LOG/cuda_tests.log" | tail -1)
  failed=$(grep -cE '^\[  FAILED  \] ' "$LOG/cuda_tests.log")
  row "splash_cuda_tests" "rc=$rc ${passed#\[  PASSED  \] } ${failed} failed lines ($((SECONDS - t0)) s)"
fi

# ---- checks: logits and greedy continuations against transformers' reference, bf16 tolerance ----
FIX=.device-fixtures/tiny-mla-a
# A walk through all 12 switch directions under load.
WALK='step=3:dp,step=11:cp,step=19:dop,step=27:tp,step=35:cp,step=43:dp,step=51:dop,step=59:cp,step=67:tp,step=75:dop,step=83:dp,step=91:tp'
# The same walk two steps apart, for short runs.
WALK_FAST='step=2:dp,step=4:cp,step=6:dop,step=8:tp,step=10:cp,step=12:dp,step=14:dop,step=16:cp,step=18:tp,step=20:dop,step=22:dp,step=24:tp'
# The fixture prompts as generate input (greedy, 24 tokens each).
python3 - "$FIX" > "$LOG/fixture_prompts.jsonl" <<'PY'
import json, struct, sys
f = open(sys.argv[1] + "/reference.safetensors", "rb"); n = struct.unpack("<Q", f.read(8))[0]; h = json.loads(f.read(n))
for k in sorted(int(x[1:].split(".")[0]) for x in h if x.endswith(".input_ids")):
  m = h[f"p{k}.input_ids"]; f.seek(8 + n + m["data_offsets"][0])
  ids = list(struct.unpack(f"<{m['shape'][0]}q", f.read(8 * m["shape"][0])))
  print(json.dumps({"input_ids": ids, "max_tokens": 24, "temperature": 0, "ignore_eos": True}))
PY
# --replay-routing: the engine uses the reference's expert choices, so that only bf16 arithmetic differs
# (the fixture's router is nearly tied; routing itself is verified by splash_cuda_tests).
check() {  # name, model, extra args
  local name=$1 model=$2; shift 2
  t0=$SECONDS
  timeout 120 ./$BUILD/splash check --model "$model" --backend cuda --greedy-margin 0.05 --replay-routing --log-level warn "$@" > "$LOG/check_$name.log" 2>&1
  local rc=$?
  tail -9 "$LOG/check_$name.log"
  row "check $name" "rc=$rc $(grep -E 'PASS|FAIL' "$LOG/check_$name.log" | tail -1 | cut -c1-80) ($((SECONDS - t0)) s)"
}
if want checks; then
  check T1_auto $FIX
  check T1_absorbed_chunk7 $FIX --attn-form absorbed --prefill-chunk 7
  # Expanded attention in windows of 128 tokens (up to 5 per row of the 600-token prompt), merged by the
  # merge kernel's log-sum-exp output; each merge rounds the running output to bf16, so windows of a few
  # tokens would add a rounding per window (the CPU tests take windows of 1-9 tokens in f32).
  check T1_window128_chunk7 $FIX --prefill-attention-window 128 --prefill-chunk 7
  if [ "$T" -ge 2 ]; then
    for l in tp dp cp dop; do check "T${T}_$l" $FIX --ranks "$T" --attn-layout $l --prefill-chunk 7; done
    check "T${T}_switch_walk_overlapped" $FIX --ranks "$T" --attn-layout tp --prefill-chunk 7 --switch "$WALK"
    check "T${T}_switch_walk_blocking" $FIX --ranks "$T" --attn-layout tp --prefill-chunk 7 --switch "$WALK" --switch-mode blocking
  fi
  # The FP8 latent cache (docs/kv-cache-dtype.md): check's tolerance grows by 2^-3; switches move FP8 records.
  check T1_fp8_kv $FIX --kv-cache-dtype fp8_e4m3
  check T1_fp8_kv_absorbed_chunk7 $FIX --kv-cache-dtype fp8_e4m3 --attn-form absorbed --prefill-chunk 7
  if [ "$T" -ge 2 ]; then
    for l in tp dp cp dop; do check "T${T}_${l}_fp8_kv" $FIX --kv-cache-dtype fp8_e4m3 --ranks "$T" --attn-layout $l --prefill-chunk 7; done
    check "T${T}_switch_walk_fp8_kv" $FIX --kv-cache-dtype fp8_e4m3 --ranks "$T" --attn-layout tp --prefill-chunk 7 --switch "$WALK"
  fi
  # FP8 weights that stay FP8 (issue 18, docs/fp8-weights.md): the fixture quantized at load; check's
  # tolerance follows FP8's unit roundoff. TP and DOP sum in the same order; DP adds O's partial sums.
  check T1_fp8w $FIX --quantization fp8
  check T1_fp8w_absorbed_chunk7 $FIX --quantization fp8 --attn-form absorbed --prefill-chunk 7
  if [ "$T" -ge 2 ]; then
    for l in tp dp dop; do check "T${T}_${l}_fp8w" $FIX --quantization fp8 --ranks "$T" --attn-layout $l --prefill-chunk 7; done
    check "T${T}_switch_walk_fp8w" $FIX --quantization fp8 --ranks "$T" --attn-layout tp --prefill-chunk 7 --switch "$WALK"
  fi
  # Batch invariance of greedy decoding: the fixture prompts batched and one at a time give the same tokens.
  for mode in batched single; do
    extra=(); [ $mode = single ] && extra=(--max-running-requests 1)
    timeout 90 ./$BUILD/splash generate --model $FIX --backend cuda --input "$LOG/fixture_prompts.jsonl" \
      --output "$LOG/gen_$mode.jsonl" --log-level warn "${extra[@]}" 2> "$LOG/gen_$mode.log"
  done
  python3 - "$LOG/gen_batched.jsonl" "$LOG/gen_single.jsonl" > "$LOG/batch_invariance.txt" <<'PY'
import json, sys
a = [json.loads(l)["output_ids"] for l in open(sys.argv[1])]; b = [json.loads(l)["output_ids"] for l in open(sys.argv[2])]
print(f"{sum(x == y for x, y in zip(a, b))}/{len(a)} prompts identical batched vs one at a time")
PY
  row "greedy batch invariance (cuda)" "$(cat "$LOG/batch_invariance.txt")"
fi

# ---- shapes: random valid MLA checkpoints (transformers' reference) through `splash check` (issue 16) ----
# Each is checked on the CPU backend (f32, tolerance 1e-4: the model code for that shape) and on the GPU
# (bf16, routing replayed); those whose heads split four ways also at T = 2 and 4 ranks on this one GPU.
if want shapes; then
  CKPTS=$ROOT/build-device/checkpoints
  rm -rf "$CKPTS"
  SEED=${SPLASH_SHAPES_SEED:-16}
  t0=$SECONDS
  { python3 scripts/make_checkpoints.py "$CKPTS" --count "${SPLASH_SHAPES:-6}" --seed "$SEED" &&
    python3 scripts/make_checkpoints.py "$CKPTS" --count 2 --seed $((SEED + 1)) --heads-multiple-of 4; } \
    > "$LOG/make_checkpoints.log" 2>&1
  row "make random checkpoints" "rc=$? ($((SECONDS - t0)) s)"
  grep '^random-' "$LOG/make_checkpoints.log"
  for d in "$CKPTS"/random-*; do
    n=$(basename "$d")
    t0=$SECONDS
    timeout 300 ./$BUILD/splash check --model "$d" --backend cpu --log-level warn > "$LOG/check_${n}_cpu.log" 2>&1
    row "check $n cpu" "rc=$? $(grep -E 'PASS|FAIL' "$LOG/check_${n}_cpu.log" | tail -1 | cut -c1-60) ($((SECONDS - t0)) s)"
    check "${n}_T1" "$d"
    heads=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['num_attention_heads'])" "$d/config.json")
    if [ $((heads % 4)) = 0 ]; then
      check "${n}_T2_tp" "$d" --ranks 2 --ranks-per-gpu 2 --attn-layout tp
      check "${n}_T4_walk" "$d" --ranks 4 --ranks-per-gpu 4 --attn-layout tp --prefill-chunk 7 --switch "$WALK"
      # The server under concurrent load through the 12 switches (its router is not replayed).
      t0=$SECONDS
      timeout 300 python3 scripts/server_switch_check.py ./$BUILD/splash "$d" --backend cuda --ranks 2 --ranks-per-gpu 2 \
        --kv-pages 512 > "$LOG/server_switch_$n.log" 2>&1
      row "server 12 switches $n T=2" "rc=$? $(tail -1 "$LOG/server_switch_$n.log" | cut -c1-70) ($((SECONDS - t0)) s)"
    fi
  done
fi

# ---- onegpu: every multi-rank path with T ranks on one GPU (device-local communicator, issue 16) ----
if want onegpu; then
  for t in 2 4 8; do
    for l in tp dp cp dop; do check "1gpu_T${t}_$l" $FIX --ranks $t --ranks-per-gpu $t --attn-layout $l --prefill-chunk 7; done
  done
  for t in 2 4; do
    check "1gpu_T${t}_walk_overlapped" $FIX --ranks $t --ranks-per-gpu $t --attn-layout tp --prefill-chunk 7 --switch "$WALK"
    check "1gpu_T${t}_walk_blocking" $FIX --ranks $t --ranks-per-gpu $t --attn-layout tp --prefill-chunk 7 --switch "$WALK" --switch-mode blocking
  done
  # Preemption: a pool that holds the prompts but not their continuations; the recomputed logits and
  # the greedy tokens are checked like the rest.
  check 1gpu_T2_preempt $FIX --ranks 2 --ranks-per-gpu 2 --attn-layout tp --page-size 16 --kv-pages 236
  row "  preemptions" "$(grep -E 'preemptions' "$LOG/check_1gpu_T2_preempt.log" || echo 'none')"
  # The server: concurrent requests while all 12 switches run (scripts/server_switch_check.py says how it judges).
  t0=$SECONDS
  timeout 400 python3 scripts/server_switch_check.py ./$BUILD/splash $FIX --backend cuda --ranks 2 --ranks-per-gpu 2 \
    --kv-pages 512 > "$LOG/server_switch.log" 2>&1
  row "server 12 switches T=2 on 1 GPU" "rc=$? $(tail -1 "$LOG/server_switch.log" | cut -c1-60) ($((SECONDS - t0)) s)"
  tail -6 "$LOG/server_switch.log"
fi

# ---- prefix: the prefix cache and sample groups against --disable-radix-cache (issue 20) ----
# bf16 rounds differently in another batch (the groups prefill alone, not 8 at a time), and the tiny
# fixture's logits have small margins, so cache on and off agree only on part of the requests; the
# greedy group's samples must all give their leader's tokens (the CPU backend's tests require every
# output to match).
if want prefix; then
  for flags in "--ranks 1" "--ranks 2 --ranks-per-gpu 2 --attn-layout dp --page-size 16" \
               "--ranks 4 --ranks-per-gpu 4 --attn-layout cp --page-size 8"; do
    t0=$SECONDS
    name=$(echo "$flags" | tr -d ' -' | cut -c1-40)
    timeout 300 python3 scripts/prefix_cache_check.py ./$BUILD/splash $FIX --min-agreement 0.3 --backend cuda $flags \
      --kv-pages 4096 > "$LOG/prefix_$name.log" 2>&1
    row "prefix cache $flags" "rc=$? $(grep -E 'identical' "$LOG/prefix_$name.log" | cut -c1-50) ($((SECONDS - t0)) s)"
    cat "$LOG/prefix_$name.log" | tail -5
  done
fi

# ---- rl: the RL server suites (prefix cache, pause, weight updates, memory release) on the GPU, two
# ranks on one GPU (issue 20) ----
if want rl; then
  for suite in rl weights; do
    t0=$SECONDS
    SPLASH_BINARY=$ROOT/$BUILD/splash SPLASH_SERVER_ARGS="--backend cuda --ranks-per-gpu 2" \
      timeout 400 python3 -m pytest -q -p no:cacheprovider tests/server/test_$suite.py > "$LOG/server_$suite.log" 2>&1
    row "server test_$suite.py on cuda" "rc=$? $(tail -1 "$LOG/server_$suite.log" | cut -c1-60) ($((SECONDS - t0)) s)"
    grep -E "^(FAILED|E  )" "$LOG/server_$suite.log" | head -20
  done
fi

# ---- sanitize: the overlapped switch on one GPU at T = 2 under compute-sanitizer (issue 16) ----
# memcheck runs the whole 12-direction walk of `splash check`. racecheck and synccheck look inside each
# kernel (shared memory hazards, barriers), so they run a short generation of one prompt that still meets
# every kernel and switches through all 12 directions: racecheck makes each launch far slower.
if want sanitize; then
  SAN=(--backend cuda --ranks 2 --ranks-per-gpu 2 --attn-layout tp)
  for tool in ${SPLASH_SANITIZERS:-memcheck racecheck synccheck}; do
    t0=$SECONDS
    if [ $tool = memcheck ]; then
      timeout 280 compute-sanitizer --tool memcheck --error-exitcode 9 ./$BUILD/splash check --model $FIX "${SAN[@]}" \
        --prefill-chunk 7 --switch "$WALK" --greedy-margin 0.05 --replay-routing --log-level warn > "$LOG/sanitize_$tool.log" 2>&1
    else
      sed -n 2p "$LOG/fixture_prompts.jsonl" | sed 's/"max_tokens": 24/"max_tokens": 26/' > "$LOG/one_prompt.jsonl"
      timeout 280 compute-sanitizer --tool $tool --error-exitcode 9 ./$BUILD/splash generate --model $FIX "${SAN[@]}" \
        --input "$LOG/one_prompt.jsonl" --output "$LOG/sanitize_$tool.jsonl" \
        --switch "$WALK_FAST" --log-level info > "$LOG/sanitize_$tool.log" 2>&1
    fi
    rc=$?
    row "compute-sanitizer $tool T=2 walk" "rc=$rc $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$LOG/sanitize_$tool.log" | tail -1 | cut -c1-50) ($((SECONDS - t0)) s)"
    grep -E 'SUMMARY|PASS|FAIL' "$LOG/sanitize_$tool.log" | tail -3
    echo "$(grep -c '\] switch ' "$LOG/sanitize_$tool.log") switches ran under $tool"
  done
fi

# ---- multinode: two processes of one GPU each, NCCL ids passed over the TCP rendezvous ----
if want multinode && [ "$GPUS" -ge 2 ] && [ -f scripts/multinode_check.sh ]; then
  t0=$SECONDS
  OUT=$LOG timeout 400 bash scripts/multinode_check.sh "$BUILD" > "$LOG/multinode.log" 2>&1
  rc=$?
  tail -5 "$LOG/multinode.log"
  row "multinode check (2 processes)" "rc=$rc ($((SECONDS - t0)) s)"
  # The engine itself across processes: `splash check` as two one-GPU processes against one process.
  t0=$SECONDS
  OUT=$LOG timeout 700 bash scripts/multiprocess_gpu_check.sh "$BUILD" "$FIX" > "$LOG/multiprocess.log" 2>&1
  rc=$?
  grep 'multiprocess gpu check' "$LOG/multiprocess.log"
  row "multiprocess check (2 processes)" "rc=$rc ($((SECONDS - t0)) s)"
fi

# ---- benchmarks: each prints its figures next to the limit measured in the same run ----
if want ops; then  # the backend's heavy ops at DeepSeek-V3 sizes (GEMMs, MoE experts, memory-bound ops)
  t0=$SECONDS
  ./$BUILD/splash_cuda_tests --gtest_also_run_disabled_tests --gtest_filter='*PerfReport*' > "$LOG/perf_ops.log" 2>&1
  rc=$?
  sed -n '/^op /,/^\[/p' "$LOG/perf_ops.log"
  row "op throughput (perf_ops.log)" "rc=$rc ($((SECONDS - t0)) s)"
fi
if want attention; then  # attention kernels against copy bandwidth and the bf16 GEMM rate
  t0=$SECONDS
  timeout 240 ./$BUILD/splash_bench_attention > "$LOG/bench_attention.log" 2>&1
  row "bench attention (bench_attention.log)" "rc=$? ($((SECONDS - t0)) s)"
  tail -45 "$LOG/bench_attention.log"
  # The peer at the generic rows' shapes, in the same call: PyTorch's fused attention.
  t0=$SECONDS
  timeout 120 python3 bench/attention_peer.py > "$LOG/attention_peer.log" 2>&1
  row "attention peer (attention_peer.log)" "rc=$? ($((SECONDS - t0)) s)"
  cat "$LOG/attention_peer.log"
fi
if want peer; then  # issue 17: FlashInfer (wheels carried in .peer-wheels) and cuDNN next to splash_bench_attention
  t0=$SECONDS
  [ -s "$LOG/bench_attention.log" ] || timeout 240 ./$BUILD/splash_bench_attention > "$LOG/bench_attention.log" 2>&1
  PEER=/tmp/splash-peer-py
  if ls .peer-wheels/*.whl >/dev/null 2>&1; then
    rm -rf "$PEER"
    python3 -m pip install -q --no-index --no-deps --target "$PEER" .peer-wheels/*.whl > "$LOG/peer_install.log" 2>&1
  fi
  # FlashInfer compiles its kernels on first use: ninja from the wheels, nvcc from the toolkit.
  [ -d /usr/local/cuda ] && export CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
  PATH=$PEER/bin:${CUDA_HOME:+$CUDA_HOME/bin:}$PATH PYTHONPATH=$PEER${PYTHONPATH:+:$PYTHONPATH} \
    timeout 480 python3 bench/peer_mla.py --output "$LOG/peer.json" > "$LOG/peer_mla.log" 2>&1
  rc=$?
  tail -5 "$LOG/peer_mla.log"
  python3 bench/peer_table.py "$LOG/bench_attention.log" "$LOG/peer.json" | tee "$LOG/peer_table.txt"
  python3 bench/peer_table.py "$LOG/bench_attention.log" "$LOG/peer.json" --markdown > "$LOG/peer_table.md"
  row "attention vs peers (peer_table.txt)" "rc=$rc ($((SECONDS - t0)) s)"
fi
if want calibrate; then  # the scheduler's cost profile of one GPU (issue 15), named by the GPU (h100, h200)
  t0=$SECONDS
  GPU_TAG=$(head -1 "$LOG/gpu.txt" | tr 'A-Z' 'a-z' | grep -oE '\b[a-z][0-9]{2,4}\b' | head -1)
  PROFILE=profile-${GPU_TAG:-gpu}.json
  CAL=(); [ "$QUICK" = 1 ] && CAL=(--quick)
  timeout 300 ./$BUILD/splash calibrate --backend cuda --ranks 1 --model builtin:deepseek-v2-lite \
    --output "$LOG/$PROFILE" "${CAL[@]}" > "$LOG/calibrate.log" 2>&1  # finish() copies it to $OUT
  rc=$?
  cat "$LOG/calibrate.log"
  row "calibrate 1 GPU ($PROFILE)" "rc=$rc ($((SECONDS - t0)) s)"
fi
if want scheduler; then  # issue 15: a DeepSeek-V3 profile for the simulator, and the simulator against a measured trace on this GPU
  t0=$SECONDS
  GPU_TAG=$(head -1 "$LOG/gpu.txt" | tr 'A-Z' 'a-z' | grep -oE '\b[a-z][0-9]{2,4}\b' | head -1)
  timeout 120 ./$BUILD/splash calibrate --backend cuda --ranks 1 --model builtin:deepseek-v3 \
    --output "$LOG/profile-${GPU_TAG:-gpu}-deepseek-v3.json" > "$LOG/calibrate_v3.log" 2>&1
  row "calibrate deepseek-v3 (calibrate_v3.log)" "rc=$? ($((SECONDS - t0)) s)"
  t0=$SECONDS
  TR=(--trace rollout-drain --trace-size ${SPLASH_TRACE_SIZE:-32} --trace-context 4096 --time-scale 0.005)
  timeout 240 ./$BUILD/splash bench trace --backend cuda --ranks 1 --model builtin:deepseek-v2-lite --layouts tp \
    "${TR[@]}" --csv "$LOG/trace_v2lite.csv" > "$LOG/trace_v2lite.log" 2>&1
  row "bench trace v2-lite T=1 (trace_v2lite.log)" "rc=$? ($((SECONDS - t0)) s)"
  grep -v '^\[' "$LOG/trace_v2lite.log" | tail -6
  MEM=$(awk -F', ' '{print int($3 / 1024) "G"}' "$LOG/gpu.txt" | head -1)
  timeout 60 ./$BUILD/splash simulate --profile "$LOG/$PROFILE" --model builtin:deepseek-v2-lite --ranks 1 --backend cuda \
    --mem-per-rank "$MEM" --layouts tp "${TR[@]}" --compare "$LOG/trace_v2lite.csv" > "$LOG/simulate_v2lite.log" 2>&1
  row "simulate v2-lite vs measured (simulate_v2lite.log)" "rc=$?"
  grep -v '^\[' "$LOG/simulate_v2lite.log" | tail -4
fi
bench() {  # name, timeout, splash bench args...
  local name=$1 limit=$2; shift 2
  t0=$SECONDS
  timeout "$limit" ./$BUILD/splash bench "$@" --json "$LOG/$name.json" > "$LOG/$name.log" 2>&1
  local rc=$?
  cat "$LOG/$name.log" | grep -v '^\[' | tail -60
  row "bench $name ($name.log)" "rc=$rc ($((SECONDS - t0)) s)"
}
if want e2e; then  # end-to-end tokens/s of a DeepSeek-V2-Lite-shaped dummy model on one GPU, next to its roofline
  if [ "$QUICK" = 1 ]; then E2E=(--input-len 512 --output-len 16); BATCHES=(8); else E2E=(--input-len 1024 --output-len 128); BATCHES=(1 8 64); fi
  for b in "${BATCHES[@]}"; do
    bench "e2e_v2lite_b$b" 300 e2e --backend cuda --model builtin:deepseek-v2-lite --load-format dummy --batch "$b" "${E2E[@]}"
    # The same step without CUDA graphs (issue 18: what the graphs buy), and with an FP8 latent cache (issue 17).
    bench "e2e_v2lite_b${b}_eager" 300 e2e --backend cuda --model builtin:deepseek-v2-lite --load-format dummy --batch "$b" \
      "${E2E[@]}" --disable-cuda-graph
    bench "e2e_v2lite_b${b}_fp8kv" 300 e2e --backend cuda --model builtin:deepseek-v2-lite --load-format dummy --batch "$b" \
      "${E2E[@]}" --kv-cache-dtype fp8_e4m3
  done
fi
if want e2e_fp8w; then  # issue 18: the same step with FP8 weights, against the FP8 roofline
  if [ "$QUICK" = 1 ]; then E2E=(--input-len 512 --output-len 16); BATCHES=(8); else E2E=(--input-len 1024 --output-len 128); BATCHES=(1 8 64); fi
  for b in "${BATCHES[@]}"; do
    bench "e2e_v2lite_b${b}_fp8w" 300 e2e --backend cuda --model builtin:deepseek-v2-lite --load-format dummy --batch "$b" \
      "${E2E[@]}" --quantization fp8
  done
  bench "e2e_v3attn_b64_fp8w" 300 e2e --backend cuda --model builtin:deepseek-v3-attn --load-format dummy --batch 64 \
    "${E2E[@]}" --quantization fp8
fi
if want profile; then  # issue 18: where a decode step's time goes, kernel by kernel (Nsight Compute, eager steps)
  for b in ${SPLASH_PROFILE_BATCHES:-1 64}; do
    t0=$SECONDS
    timeout 400 ncu --clock-control none --metrics gpu__time_duration.sum --csv --log-file "$LOG/ncu_b$b.log" \
      ./$BUILD/splash bench e2e --backend cuda --model builtin:deepseek-v2-lite --load-format dummy --batch "$b" \
      --input-len 32 --output-len 5 --warmup 0 --disable-cuda-graph --bandwidth-gbs 3000 --peak-tflops 800 \
      > "$LOG/ncu_b$b.out" 2> "$LOG/ncu_b$b.err"
    rc=$?
    python3 bench/kernel_profile.py "$LOG/ncu_b$b.log" --steps 4 | tee "$LOG/profile_b$b.txt" | head -40
    row "kernel profile B=$b (profile_b$b.txt)" "rc=$rc ($((SECONDS - t0)) s)"
  done
fi
if want traces && [ "$T" -ge 2 ]; then  # issue 22: the scheduler and the simulator against real NCCL runs at T ranks
  GPU_TAG=$(head -1 "$LOG/gpu.txt" | tr 'A-Z' 'a-z' | grep -oE '\b[a-z][0-9]{2,4}\b' | head -1)
  PROF=$LOG/profile-${GPU_TAG:-gpu}-x$T-deepseek-v3-attn.json
  MODEL=(--model builtin:deepseek-v3-attn --load-format dummy)
  t0=$SECONDS
  timeout 300 ./$BUILD/splash calibrate --backend cuda --ranks "$T" "${MODEL[@]}" --output "$PROF" > "$LOG/calibrate_x$T.log" 2>&1
  row "calibrate T=$T deepseek-v3-attn" "rc=$? ($((SECONDS - t0)) s)"
  grep -v '^\[' "$LOG/calibrate_x$T.log" | tail -3
  MEM=$(awk -F', ' '{print int($3 / 1024) "G"}' "$LOG/gpu.txt" | head -1)
  for tr in ${SPLASH_TRACES:-rollout-drain long-context-mix phase-change grpo}; do
    TR=(--trace "$tr" --trace-size ${SPLASH_TRACE_SIZE:-16} --trace-context ${SPLASH_TRACE_CONTEXT:-4096} --time-scale 0.01)
    t0=$SECONDS
    timeout 400 ./$BUILD/splash bench trace --backend cuda --ranks "$T" "${MODEL[@]}" --layouts tp,dp,cp,dop,auto \
      --cost-profile "$PROF" "${TR[@]}" --csv "$LOG/trace_${tr}_x$T.csv" > "$LOG/trace_${tr}_x$T.log" 2>&1
    row "bench trace $tr T=$T" "rc=$? ($((SECONDS - t0)) s)"
    grep -v '^\[' "$LOG/trace_${tr}_x$T.log" | tail -8
    timeout 120 ./$BUILD/splash simulate --profile "$PROF" --model builtin:deepseek-v3-attn --ranks "$T" --backend cuda \
      --mem-per-rank "$MEM" --layouts tp,dp,cp,dop,auto "${TR[@]}" --compare "$LOG/trace_${tr}_x$T.csv" \
      > "$LOG/simulate_${tr}_x$T.log" 2>&1
    row "simulate $tr T=$T vs measured" "rc=$?"
    grep -v '^\[' "$LOG/simulate_${tr}_x$T.log" | tail -9
  done
fi
if want switch && [ "$T" -ge 2 ]; then  # paper section 5: switch primitives and the 12-direction live table
  if [ "$QUICK" = 1 ]; then SW=(--contexts 4096,16384 --runs 3); else SW=(--contexts ${SPLASH_SWITCH_CONTEXTS:-16384,32768,65536,131072} --runs 20); fi
  bench "switch_t$T" 540 switch --backend cuda --ranks "$T" "${SW[@]}"
fi
if want layouts && [ "$T" -ge 2 ]; then  # paper section 5.2: fixed-layout throughput and KV capacity
  if [ "$QUICK" = 1 ]; then LY=(--batches 1,16 --input-lens 1024,16384 --output-len 64 --runs 1); else LY=(--batches 1,16,32 --input-lens ${SPLASH_LAYOUT_LENS:-1024,4096,16384,65536,131072} --runs 2); fi
  bench "layouts_t$T" 540 layouts --backend cuda --ranks "$T" --mem-fraction 0.9 "${LY[@]}"
fi

echo
echo "================ device summary ($(head -1 "$LOG/gpu.txt"), $GPUS GPUs) ================"
printf '%s\n' "${ROWS[@]}"
