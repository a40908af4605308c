#!/usr/bin/env bash
# NCCL across processes on one machine: splash_comm_check as two processes of one GPU each (nodes 0
# and 1 of --nnodes 2, joined by the TCP rendezvous on 127.0.0.1), then as one process over every GPU
# (--nnodes 1). One PASS/FAIL line per process; exit 0 when all pass. Needs 2+ GPUs: with fewer it
# says SKIPPED and exits 0. Logs in $OUT/multinode (or BUILD_DIR/multinode).
#
#   bash scripts/multinode_check.sh [BUILD_DIR]      # default: build
set -uo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
BIN=$BUILD/splash_comm_check
LIMIT=${SPLASH_MULTINODE_TIMEOUT:-300}  # seconds per process, NCCL's setup included
LOGS=${OUT:-$BUILD}/multinode
mkdir -p "$LOGS"
status=0

# One line per process; a failure also shows the end of its log.
report() {  # NAME EXIT_CODE LOG
  if [ "$2" -eq 0 ]; then
    echo "multinode check: $1: PASS"
    return
  fi
  local why="exit $2"
  [ "$2" -eq 124 ] || [ "$2" -eq 137 ] && why="timed out after $LIMIT s"
  echo "multinode check: $1: FAIL ($why; log $3)"
  tail -n 20 "$3" | sed 's/^/    /'
  status=1
}

if [ ! -x "$BIN" ]; then
  echo "multinode check: FAIL: $BIN is not built (it needs CUDA and NCCL)"
  exit 1
fi
# The GPUs this script may use: CUDA_VISIBLE_DEVICES's, else every one nvidia-smi lists.
if [ -n "${CUDA_VISIBLE_DEVICES:-}" ]; then
  IFS=, read -ra DEVICES <<< "$CUDA_VISIBLE_DEVICES"
else
  mapfile -t DEVICES < <(nvidia-smi --query-gpu=index --format=csv,noheader 2>/dev/null)
fi
if [ "${#DEVICES[@]}" -lt 2 ]; then
  echo "multinode check: SKIPPED (two one-GPU processes need 2 GPUs; ${#DEVICES[@]} visible)"
  exit 0
fi

# Both "nodes" are this machine, so NCCL's own bootstrap may use the loopback interface.
export NCCL_SOCKET_IFNAME=${NCCL_SOCKET_IFNAME:-lo} NCCL_NVLS_ENABLE=0
PORT=${SPLASH_MULTINODE_PORT:-$((29500 + RANDOM % 2000))}
pids=()
for node in 0 1; do
  CUDA_VISIBLE_DEVICES=${DEVICES[$node]} timeout -k 10 "$LIMIT" "$BIN" --nnodes 2 --node-rank "$node" \
      --dist-init-addr "127.0.0.1:$PORT" --dist-timeout 120 > "$LOGS/node$node.log" 2>&1 &
  pids+=($!)
done
for node in 0 1; do
  wait "${pids[$node]}"
  report "2 processes x 1 GPU, node $node" $? "$LOGS/node$node.log"
done

CUDA_VISIBLE_DEVICES=$(IFS=,; echo "${DEVICES[*]}") timeout -k 10 "$LIMIT" "$BIN" --nnodes 1 > "$LOGS/single.log" 2>&1
report "1 process x ${#DEVICES[@]} GPUs" $? "$LOGS/single.log"
exit $status
