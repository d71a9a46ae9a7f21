#!/usr/bin/env bash
# HTTP/2 conformance: runs h2spec against a freshly started Sluice.
#
#   1. TLS listener (ALPN h2)                h2spec -t -k
#   2. TLS listener, strict mode             h2spec -t -k -S
#   3. cleartext listener (h2c prior knowledge) h2spec
#
# Uses target/release/sluice (built with `cargo build --release -p sluice` only when absent;
# set SLUICE_BIN to test another binary). Sluice runs on free loopback ports with a temporary
# config, data dir and document root, and is always stopped on exit. Exits non-zero when any
# h2spec test fails; exits 0 with a SKIP note when h2spec is not installed (scripts/setup.sh
# installs it).
#
# Usage: scripts/h2spec.sh [--keep]     (--keep: keep the temp dir with logs and reports)
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
H2SPEC_TIMEOUT=${H2SPEC_TIMEOUT:-300}
KEEP=0
[ "${1:-}" = --keep ] && KEEP=1

log() { printf 'h2spec.sh: %s\n' "$*"; }
die() { printf 'h2spec.sh: ERROR: %s\n' "$*" >&2; exit 1; }

# --- tools --------------------------------------------------------------------------------
find_h2spec() {
  if command -v h2spec >/dev/null 2>&1; then
    command -v h2spec
    return 0
  fi
  local gobin=""
  if command -v go >/dev/null 2>&1; then
    gobin=$(go env GOBIN 2>/dev/null || true)
    [ -n "$gobin" ] || gobin="$(go env GOPATH 2>/dev/null | cut -d: -f1)/bin"
  fi
  for p in "$gobin/h2spec" "$HOME/go/bin/h2spec"; do
    [ -x "$p" ] && { echo "$p"; return 0; }
  done
  return 1
}
if ! H2SPEC=$(find_h2spec); then
  log "SKIP: h2spec not found (run scripts/setup.sh, or: go install github.com/summerwind/h2spec/cmd/h2spec@latest)"
  exit 0
fi

SLUICE=${SLUICE_BIN:-$REPO/target/release/sluice}
if [ ! -x "$SLUICE" ]; then
  [ -n "${SLUICE_BIN:-}" ] && die "SLUICE_BIN=$SLUICE is not executable"
  log "building $SLUICE (cargo build --release -p sluice)"
  (cd "$REPO" && cargo build --release -p sluice)
fi

# --- helpers ------------------------------------------------------------------------------
# A loopback TCP port nobody listens on (the kernel's choice when python3 is there).
free_port() {
  if command -v python3 >/dev/null 2>&1; then
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'
    return
  fi
  local p
  for _ in $(seq 100); do
    p=$((20000 + RANDOM % 40000))
    if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then echo "$p"; return; fi
  done
  die "no free port found"
}
# Waits until 127.0.0.1:$1 accepts, while process $2 lives; at most $3 seconds.
wait_port() {
  local port=$1 pid=$2 secs=$3 i
  for ((i = 0; i < secs * 10; i++)); do
    (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && return 0
    kill -0 "$pid" 2>/dev/null || return 1
    sleep 0.1
  done
  return 1
}

TMP=$(mktemp -d "${TMPDIR:-/tmp}/sluice-h2spec.XXXXXX")
SERVER_PID=""
cleanup() {
  if [ -n "$SERVER_PID" ] && kill -0 "$SERVER_PID" 2>/dev/null; then
    kill -TERM "$SERVER_PID" 2>/dev/null || true
    for _ in $(seq 50); do kill -0 "$SERVER_PID" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$SERVER_PID" 2>/dev/null || true
    wait "$SERVER_PID" 2>/dev/null || true
  fi
  if [ "$KEEP" -eq 1 ]; then log "kept $TMP"; else rm -rf "$TMP"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# --- server -------------------------------------------------------------------------------
mkdir -p "$TMP/www" "$TMP/data"
# h2spec GETs and POSTs "/"; several flow-control cases need a body of more than a few bytes.
{
  echo '<!doctype html><html><head><title>h2spec</title></head><body>'
  for i in $(seq 200); do echo "<p>line $i of the h2spec index page for Sluice</p>"; done
  echo '</body></html>'
} >"$TMP/www/index.html"

TLS_PORT=$(free_port)
PLAIN_PORT=$(free_port)
while [ "$PLAIN_PORT" = "$TLS_PORT" ]; do PLAIN_PORT=$(free_port); done
cat >"$TMP/sluice.toml" <<EOF
data_dir = '$TMP/data'
access_log = false

[[listener]]
addr = "127.0.0.1:$TLS_PORT"
tls = true

[[listener]]
addr = "127.0.0.1:$PLAIN_PORT"
tls = false

[[site]]
root = '$TMP/www'

[timeouts]
drain_secs = 1
EOF

log "starting $SLUICE on 127.0.0.1:$TLS_PORT (TLS) and 127.0.0.1:$PLAIN_PORT (h2c)"
"$SLUICE" serve --config "$TMP/sluice.toml" >"$TMP/server.log" 2>&1 &
SERVER_PID=$!
if ! wait_port "$TLS_PORT" "$SERVER_PID" 30 || ! wait_port "$PLAIN_PORT" "$SERVER_PID" 5; then
  echo "----- server log -----" >&2
  cat "$TMP/server.log" >&2 || true
  die "sluice did not start listening on $TLS_PORT and $PLAIN_PORT"
fi

# --- h2spec runs --------------------------------------------------------------------------
declare -a NAMES=() RESULTS=()
failed=0
run_h2spec() {
  local name=$1 report=$TMP/h2spec-$1.txt rc=0 summary
  shift
  log "running: h2spec $* ($name)"
  timeout "$H2SPEC_TIMEOUT" "$H2SPEC" "$@" >"$report" 2>&1 || rc=$?
  summary=$(grep -E '^[0-9]+ tests, ' "$report" | tail -n 1 || true)
  [ -n "$summary" ] || summary="no summary (exit $rc)"
  if [ "$rc" -ne 0 ]; then
    failed=1
    [ "$rc" -eq 124 ] && summary="TIMEOUT after ${H2SPEC_TIMEOUT}s; $summary"
    # The report ends with a "Failures:" section listing each failed case.
    if grep -q '^Failures:' "$report"; then
      sed -n '/^Failures:/,$p' "$report"
    else
      tail -n 40 "$report"
    fi
    NAMES+=("$name") RESULTS+=("FAIL  $summary")
  else
    NAMES+=("$name") RESULTS+=("ok    $summary")
  fi
  if ! kill -0 "$SERVER_PID" 2>/dev/null; then
    failed=1
    log "sluice exited during the $name run; its log:"
    cat "$TMP/server.log" >&2 || true
    return 1
  fi
}

# Sluice announces SETTINGS_MAX_FRAME_SIZE 65,536, but h2spec's test 4.2/3 ("a HEADERS frame
# that exceeds the SETTINGS_MAX_FRAME_SIZE") sends five fields of --max-header-length 'x's
# (Huffman: 7 bits each) whatever the server announced: at the default 4,000 that is a 17.5 kB
# frame, over 2^14 only. 16,000 makes it 70 kB, over our limit; the other tests that use the
# length send one such field, 14 kB, within every limit.
H2SPEC_ARGS=(--max-header-length 16000)
run_h2spec tls "${H2SPEC_ARGS[@]}" -h 127.0.0.1 -p "$TLS_PORT" -t -k || true
kill -0 "$SERVER_PID" 2>/dev/null && { run_h2spec tls-strict "${H2SPEC_ARGS[@]}" -h 127.0.0.1 -p "$TLS_PORT" -t -k -S || true; }
kill -0 "$SERVER_PID" 2>/dev/null && { run_h2spec h2c "${H2SPEC_ARGS[@]}" -h 127.0.0.1 -p "$PLAIN_PORT" || true; }

echo
echo "h2spec summary ($("$H2SPEC" --version 2>/dev/null | head -n 1 || echo h2spec)):"
for i in "${!NAMES[@]}"; do printf '  %-11s %s\n' "${NAMES[$i]}" "${RESULTS[$i]}"; done
if [ "$failed" -ne 0 ]; then
  log "FAILED (rerun with --keep to keep the full reports and the server log)"
  exit 1
fi
log "all h2spec runs passed"
