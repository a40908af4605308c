#!/usr/bin/env bash
# `mpirun -np NP splash check ARGS...` against the fixture's reference must PASS and print the same table
# as `splash check ARGS...` in one process: the same logits to the last bit (rank-order sums everywhere), so
# the same errors, margins and greedy tokens. Usage: check_matches_one_process.sh SPLASH NP ARGS...
set -euo pipefail
splash=$1 np=$2
shift 2
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
# The table and the verdict, without the wall time.
table() { sed -n '/^prompt /,/^tolerance /p' | sed 's/; [0-9]* prompts in [0-9.]* s;/;/'; }
one=$("$splash" check "$@" --log-level warn | table)
many=$(mpirun --allow-run-as-root --oversubscribe -np "$np" "$splash" check "$@" --log-level warn | table)
echo "$many"
if [ "$one" != "$many" ]; then
  echo "FAIL: $np processes differ from one process:"
  diff <(echo "$one") <(echo "$many") || true
  exit 1
fi
case "$many" in *PASS) echo "same as one process" ;; *) echo "FAIL: the check itself failed"; exit 1 ;; esac
