# One launch of `splash` over several processes, for the multi-process test scripts: under mpirun
# (LAUNCHER mpi), or as SGLang users start it, one process per --node-rank meeting at --dist-init-addr
# 127.0.0.1:PORT (LAUNCHER tcp). Source this file, then:
#   start_launch LAUNCHER NP LOG SPLASH ARGS...  starts `SPLASH ARGS...` in the background, all output into LOG
#   log_line PATTERN                             prints the first line of LOG that matches, once there is one
#   process_pid P                                prints process P's pid once it follows process 0 (its log line)
#   wait_process P SECONDS                       returns process P's exit code (mpi: P 0 is mpirun's), 124
#                                                when it had not ended within SECONDS (it is killed then)
#   wait_launch SECONDS                          waits for every process; true when all exited 0; codes
#                                                in launch_codes
#   stop_launch                                  kills what is left (for an EXIT trap)
# With tcp, processes 1.. run `SPLASH ARGS...` with the array follower_args instead of ARGS when it is set.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
launcher="" launch_log="" launch_pids=() launch_codes=() follower_args=()

# A port that is free now (the kernel's pick).
free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

# Whether process PID listens on PORT: one of its sockets is a listening one on that port.
listens_on() {
  local inode
  for inode in $(awk -v p="$(printf ':%04X' "$2")" '$4 == "0A" && substr($2, length($2) - 4) == p { print $10 }' \
                   /proc/net/tcp /proc/net/tcp6 2>/dev/null); do
    ls -l "/proc/$1/fd" 2>/dev/null | grep -q "socket:\[$inode\]" && return 0
  done
  return 1
}

# Whether PID has not ended (a stopped process has not; an ended one not waited for yet is a zombie).
running() {
  local state
  state=$(awk '{ print $3 }' "/proc/$1/stat" 2>/dev/null)
  [ -n "$state" ] && [ "$state" != Z ]
}

start_launch() {
  launcher=$1 launch_log=$3
  local np=$2 splash=$4 attempt port r
  shift 4
  launch_pids=()
  : >"$launch_log"
  if [ "$launcher" = mpi ]; then
    mpirun --allow-run-as-root --oversubscribe -np "$np" "$splash" "$@" >>"$launch_log" 2>&1 &
    launch_pids=($!)
    return
  fi
  # Process 0 first, the others once it listens: a port that another launch took in the meantime then
  # fails process 0 alone (and another port is tried), and never joins processes of two launches.
  for attempt in 1 2 3 4 5; do
    port=$(free_port)
    "$splash" "$@" --nnodes "$np" --node-rank 0 --dist-init-addr "127.0.0.1:$port" >>"$launch_log" 2>&1 &
    launch_pids=($!)
    while running "${launch_pids[0]}" && ! listens_on "${launch_pids[0]}" "$port"; do sleep 0.05; done
    running "${launch_pids[0]}" && break
    wait "${launch_pids[0]}"
    grep -q "cannot listen on port $port" "$launch_log" || return 1
  done
  running "${launch_pids[0]}" || return 1
  [ ${#follower_args[@]} -gt 0 ] || follower_args=("$@")
  for ((r = 1; r < np; ++r)); do
    "$splash" "${follower_args[@]}" --nnodes "$np" --node-rank "$r" --dist-init-addr "127.0.0.1:$port" >>"$launch_log" 2>&1 &
    launch_pids+=($!)
  done
}

log_line() {
  local i line
  for i in $(seq 1 600); do
    line=$(grep -m1 "$1" "$launch_log") && { echo "$line"; return 0; }
    sleep 0.1
  done
  return 1
}

process_pid() {
  if [ "$launcher" = tcp ] && [ "$1" -eq 0 ]; then
    echo "${launch_pids[0]}"
  else
    log_line "process $1 of [0-9]* (pid [0-9]*)" | sed 's/.*(pid \([0-9]*\)).*/\1/'
  fi
}

wait_process() {
  local pid=${launch_pids[$1]} end=$((SECONDS + $2))
  while running "$pid" && [ "$SECONDS" -lt "$end" ]; do sleep 0.05; done
  if running "$pid"; then
    kill -9 "$pid"
    wait "$pid"
    return 124
  fi
  wait "$pid"
}

wait_launch() {
  local p ok=0
  launch_codes=()
  for p in "${!launch_pids[@]}"; do
    wait_process "$p" "$1"
    launch_codes[$p]=$?
    [ "${launch_codes[$p]}" -eq 0 ] || ok=1
  done
  return $ok
}

stop_launch() {
  local pid
  for pid in "${launch_pids[@]}"; do running "$pid" && kill -9 "$pid" 2>/dev/null; done
  return 0
}
