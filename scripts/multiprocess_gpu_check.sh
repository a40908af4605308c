#!/usr/bin/env bash
# The engine across processes on GPUs (issue 21): `splash check` as two processes of one GPU each,
# joined by the TCP rendezvous on 127.0.0.1 (NCCL between the GPUs, the step plans over the process
# link), next to one process over the same two GPUs. Each case must pass the check, and the two-process
# table must equal the one-process table line for line (the same NCCL ranks, so the same numbers).
# Needs 2+ GPUs (with fewer it says SKIPPED and exits 0); exits 1 if any case fails.
#
#   bash scripts/multiprocess_gpu_check.sh BUILD_DIR FIXTURE_DIR
set -uo pipefail
BUILD=${1:?build dir}
FIX=${2:?fixture dir}
LOGS=${OUT:-$BUILD}/multiprocess
mkdir -p "$LOGS"
export NCCL_NVLS_ENABLE=0 NCCL_SOCKET_IFNAME=lo
if [ "$(nvidia-smi -L 2>/dev/null | wc -l)" -lt 2 ]; then echo "multiprocess gpu check: SKIPPED (fewer than 2 GPUs)"; exit 0; fi
WALK='step=3:dp,step=11:cp,step=19:dop,step=27:tp,step=35:cp,step=43:dp,step=51:dop,step=59:cp,step=67:tp,step=75:dop,step=83:dp,step=91:tp'
# Routing cannot be replayed across processes: near-tied expert choices may flip in bf16, which
# --max-outliers admits; the comparison with one process is exact all the same.
ARGS=(check --backend cuda --model "$FIX" --ranks 2 --greedy-margin 0.05 --max-outliers 0.25 --log-level warn)
status=0
table() { grep -E '^(p[0-9]+ |tolerance)' "$1" | sed 's/ in [0-9.]* s;/;/'; }
case_() {  # NAME, check flags...
  local name=$1; shift
  local port=$((20000 + RANDOM % 20000))
  timeout 180 "$BUILD/splash" "${ARGS[@]}" "$@" > "$LOGS/$name.one.log" 2>&1
  local one=$?
  CUDA_VISIBLE_DEVICES=1 timeout 180 "$BUILD/splash" "${ARGS[@]}" "$@" --nnodes 2 --node-rank 1 \
    --dist-init-addr "127.0.0.1:$port" > "$LOGS/$name.p1.log" 2>&1 &
  CUDA_VISIBLE_DEVICES=0 timeout 180 "$BUILD/splash" "${ARGS[@]}" "$@" --nnodes 2 --node-rank 0 \
    --dist-init-addr "127.0.0.1:$port" > "$LOGS/$name.p0.log" 2>&1
  local p0=$?
  wait $!
  local p1=$?
  local same=no
  diff <(table "$LOGS/$name.one.log") <(table "$LOGS/$name.p0.log") > "$LOGS/$name.diff" && same=yes
  echo "multiprocess gpu check: $name: one process rc=$one, two processes rc=$p0/$p1, same table: $same"
  table "$LOGS/$name.p0.log" | tail -1
  if [ $one -ne 0 ] || [ $p0 -ne 0 ] || [ $p1 -ne 0 ] || [ $same != yes ]; then
    status=1
    tail -n 5 "$LOGS/$name.p0.log" "$LOGS/$name.p1.log" "$LOGS/$name.diff" | sed 's/^/    /'
  fi
}
case_ tp --attn-layout tp
case_ dp --attn-layout dp --prefill-chunk 7
case_ walk --attn-layout tp --prefill-chunk 7 --switch "$WALK"
exit $status
