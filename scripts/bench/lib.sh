# Shell functions the benchmark scripts share (sourced, not run).

# free_port: a TCP port free on 127.0.0.1 now.
free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'
}

# stop_pid PID: stop a server started in the background: TERM, up to a minute to exit (a
# server under valgrind writes its profiles as it exits), then KILL; reaped either way.
stop_pid() {
  local pid=$1
  if kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 600); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null || true
  fi
  wait "$pid" 2>/dev/null || true
}

# callgrind_total DIR: the sum of the instruction totals of every callgrind profile in DIR.
callgrind_total() {
  awk '/^summary:/ { s += $2 } END { printf "%.0f\n", s }' "$1"/callgrind.out.*
}
