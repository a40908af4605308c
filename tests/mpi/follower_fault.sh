#!/usr/bin/env bash
# A follower that dies (SIGKILL) or hangs (SIGSTOP) in the middle of `mpirun -np 2 splash generate`: the
# launch must end non-zero within --dist-timeout (plus start-up and a margin), never hang, and say why.
# Usage: follower_fault.sh SPLASH FIXTURE KILL|STOP
set -uo pipefail
splash=$1 fixture=$2 signal=$3
timeout_s=5
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
log=$(mktemp)
input=$(mktemp)
trap 'rm -f "$log" "$input"' EXIT
# Long enough that the fault lands mid-generation: 8 requests of 4000 tokens each.
for i in 1 2 3 4 5 6 7 8; do echo "{\"input_ids\": [$i, 7, 9], \"max_tokens\": 4000, \"ignore_eos\": true}"; done >"$input"
timeout 120 mpirun --allow-run-as-root --oversubscribe -np 2 "$splash" generate --model "$fixture" --ranks 2 \
  --attn-layout dp --input "$input" --dist-timeout $timeout_s --output /dev/null >"$log" 2>&1 &
launcher=$!
# The follower says its pid once it waits for commands; the fault comes once tokens flow.
pid=""
for _ in $(seq 1 300); do
  pid=$(sed -n 's/.*process 1 of 2 (pid \([0-9]*\)).*/\1/p' "$log" | head -1)
  [ -n "$pid" ] && break
  sleep 0.1
done
[ -n "$pid" ] || { echo "FAIL: the follower never started"; cat "$log"; exit 1; }
sleep 2
kill -0 "$launcher" 2>/dev/null || { echo "FAIL: the generation ended before the fault"; cat "$log"; exit 1; }
start=$(date +%s.%N)
kill -"$signal" "$pid"
wait "$launcher"
code=$?
took=$(awk -v end="$(date +%s.%N)" -v start="$start" 'BEGIN { printf "%.2f", end - start }')
kill -9 "$pid" 2>/dev/null  # a stopped follower mpirun could not end
cat "$log" | grep -v "^\s*$" | tail -25
echo "exit code $code after ${took} s"
fail=0
[ "$code" -ne 0 ] || { echo "FAIL: the launch exited 0"; fail=1; }
[ "$code" -ne 124 ] || { echo "FAIL: the launch hung"; fail=1; }
# Within the timeout, plus the moment the leader leaves for in-flight answers and mpirun's teardown.
awk -v t="$took" -v lim=$((timeout_s + 10)) 'BEGIN { exit !(t < lim) }' || { echo "FAIL: took ${took} s"; fail=1; }
if [ "$signal" = STOP ]; then
  # Process 0 names the silent one: rank 1 in a collective, or process 1 taking a command or answering it.
  grep -q "stopped answering: .*\(rank(s) 1 did not answer\|process(es) 1 sent no reply\|process(es) 1 did not take a command\) within $timeout_s s" "$log" &&
    grep -q "^error: .*; ending every process of the launch" "$log" ||
    { echo "FAIL: no message naming the hung process"; fail=1; }
else
  grep -qi "process 1\|rank 1" "$log" || { echo "FAIL: no message naming the dead process"; fail=1; }
fi
exit $fail
