#!/usr/bin/env bash
# Two processes of a TCP launch started with other --ranks: every process fails at start, before any
# weight loads, naming the difference. Usage: flags_differ.sh SPLASH FIXTURE
set -uo pipefail
splash=$1 fixture=$2
source "$(dirname "$0")/../common/launch.sh"
log=$(mktemp)
trap 'stop_launch; rm -f "$log"' EXIT
follower_args=(check --model "$fixture" --ranks 2 --attn-layout dp)
start_launch tcp 2 "$log" "$splash" check --model "$fixture" --ranks 4 --attn-layout dp ||
  { echo "FAIL: the launch did not start"; cat "$log"; exit 1; }
wait_launch 60
cat "$log"
echo "exit codes ${launch_codes[*]}"
want="error: process 1 was started with '--ranks 2' but process 0 with '--ranks 4'"
[ "$(grep -c "^$want" "$log")" -eq 2 ] || { echo "FAIL: not every process named the difference"; exit 1; }
[ "${launch_codes[0]}" -eq 2 ] && [ "${launch_codes[1]}" -eq 2 ] || { echo "FAIL: not every process exited 2"; exit 1; }
