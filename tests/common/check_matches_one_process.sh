#!/usr/bin/env bash
# `splash check ARGS...` over each process count of NPS, launched with mpirun or with the TCP rendezvous
# flags (launch.sh), must PASS against the fixture's reference and print the same table as `splash check
# ARGS...` in one process: the same logits to the last bit (rank-order sums everywhere), so the same
# errors, margins and greedy tokens. Every process must exit 0.
# Usage: check_matches_one_process.sh SPLASH mpi|tcp NPS ARGS...   (NPS: one count, or several: 2,4)
set -euo pipefail
splash=$1 mode=$2 nps=$3
shift 3
source "$(dirname "$0")/launch.sh"
log=$(mktemp)
trap 'stop_launch; rm -f "$log"' EXIT
# The table and the verdict, without the wall time.
table() { sed -n '/^prompt /,/^tolerance /p' | sed 's/; [0-9]* prompts in [0-9.]* s;/;/'; }
one=$("$splash" check "$@" --log-level warn | table)
for np in ${nps//,/ }; do
  start_launch "$mode" "$np" "$log" "$splash" check "$@" --log-level warn
  if ! wait_launch 240; then
    echo "FAIL: $np processes exited with codes ${launch_codes[*]}:"
    cat "$log"
    exit 1
  fi
  many=$(table <"$log")
  echo "$np processes:"
  echo "$many"
  if [ "$one" != "$many" ]; then
    echo "FAIL: $np processes differ from one process:"
    diff <(echo "$one") <(echo "$many") || true
    exit 1
  fi
  case "$many" in *PASS) ;; *) echo "FAIL: the check itself failed"; exit 1 ;; esac
done
echo "same as one process"
