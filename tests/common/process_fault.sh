#!/usr/bin/env bash
# A process that dies (SIGKILL) or hangs (SIGSTOP) in the middle of a two-process `splash generate`,
# launched with mpirun or with the TCP rendezvous flags (launch.sh): the launch must end non-zero within
# --dist-timeout (plus start-up and a margin), never hang, and say why, naming the process.
# Usage: process_fault.sh SPLASH FIXTURE mpi|tcp KILL|STOP [VICTIM]
#   VICTIM: the process hit, 1 (a follower) unless given; 0 (the leader) with tcp only, where process 1
#   must then end on its own.
set -uo pipefail
splash=$1 fixture=$2 mode=$3 signal=$4 victim=${5:-1}
timeout_s=4
source "$(dirname "$0")/launch.sh"
log=$(mktemp)
input=$(mktemp)
trap 'stop_launch; rm -f "$log" "$input"' EXIT
# Long enough that the fault lands mid-generation: 8 requests of 4000 tokens each.
for i in 1 2 3 4 5 6 7 8; do echo "{\"input_ids\": [$i, 7, 9], \"max_tokens\": 4000, \"ignore_eos\": true}"; done >"$input"
# KV for them and no more: sizing it for the whole memory takes seconds at every start.
start_launch "$mode" 2 "$log" "$splash" generate --model "$fixture" --ranks 2 --attn-layout dp --input "$input" \
  --kv-pages 4096 --dist-timeout $timeout_s --output /dev/null || { echo "FAIL: the launch did not start"; cat "$log"; exit 1; }
# mpirun stands for the whole launch; over TCP the process that was not hit must end on its own.
watched=0
[ "$mode" = tcp ] && watched=$((1 - victim))
pid=$(process_pid "$victim") || { echo "FAIL: process $victim never started"; cat "$log"; exit 1; }
# The fault comes once tokens flow: a moment after process 0's engine is up.
log_line "\] model .* layers" >/dev/null || { echo "FAIL: the engine never started"; cat "$log"; exit 1; }
sleep 1
running "${launch_pids[$watched]}" || { echo "FAIL: the generation ended before the fault"; cat "$log"; exit 1; }
start=$(date +%s.%N)
kill -"$signal" "$pid"
wait_process "$watched" 120
code=$?
took=$(awk -v end="$(date +%s.%N)" -v start="$start" 'BEGIN { printf "%.2f", end - start }')
kill -9 "$pid" 2>/dev/null  # a stopped process nothing could end
grep -v "^\s*$" "$log" | tail -25
echo "exit code $code after ${took} s"
fail=0
[ "$code" -ne 0 ] || { echo "FAIL: the launch exited 0"; fail=1; }
[ "$code" -ne 124 ] || { echo "FAIL: the launch hung"; fail=1; }
# Within the timeout, plus the moment the leader leaves for in-flight answers and the launch's teardown.
awk -v t="$took" -v lim=$((timeout_s + 10)) 'BEGIN { exit !(t < lim) }' || { echo "FAIL: took ${took} s"; fail=1; }
if [ "$signal" = STOP ]; then
  # Process 0 names the silent one: rank 1 in a collective, or process 1 taking a command or answering it.
  want="stopped answering: .*\(rank(s) 1 did not answer\|process(es) 1 sent no reply\|process(es) 1 did not take a command\) within $timeout_s s"
  grep -q "$want" "$log" && grep -q "^error: .*; ending every process of the launch" "$log" ||
    { echo "FAIL: no message naming the hung process"; fail=1; }
elif [ "$mode" = mpi ]; then
  grep -qi "process 1\|rank 1" "$log" || { echo "FAIL: no message naming the dead process"; fail=1; }
else
  # The survivor saw the victim's connection close, at once rather than at the timeout (which would take
  # the timeout and 3 s more for the answers).
  grep -q "^error: .*process $victim is gone: its connection closed" "$log" ||
    { echo "FAIL: no message naming the dead process"; fail=1; }
  awk -v t="$took" -v lim=$((timeout_s + 2)) 'BEGIN { exit !(t < lim) }' || { echo "FAIL: took the timeout, not the close"; fail=1; }
fi
# Process 0 failed what was in flight (mpirun ends every process at a death, before it can).
if [ "$victim" = 1 ] && { [ "$signal" = STOP ] || [ "$mode" = tcp ]; }; then
  grep -q "request [0-9]* failed alone: .*a process of the group stopped answering" "$log" ||
    { echo "FAIL: process 0 did not fail the requests in flight"; fail=1; }
fi
exit $fail
