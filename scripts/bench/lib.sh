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

# require_shipped_build BIN: refuse a Sluice binary that `cargo test` linked. The server's
# dev-dependencies enable tokio's `test-util` feature (paused virtual time in unit tests), and
# Cargo links the binary an integration test runs with it: every clock read then asks whether
# time is paused, and idle connections measured 0.2–0.3 kB larger (2026-11-30). Such a binary
# carries tokio's DID_PAUSE_CLOCK symbol; `cargo build --release -p sluice` links it again as
# shipped.
require_shipped_build() {
  command -v nm >/dev/null 2>&1 || return 0
  # grep reads to the end (no -q): under pipefail an early exit would fail nm with SIGPIPE.
  if nm "$1" 2>/dev/null | grep DID_PAUSE_CLOCK >/dev/null; then
    echo "$1 was linked by cargo test (tokio's test-util is in it); run cargo build --release -p sluice first" >&2
    exit 1
  fi
}
