#!/usr/bin/env bash
# Benchmark (not a test): memory per idle TLS HTTP/2 connection, Sluice against nginx and h2o;
# with --quic, per idle HTTP/3 connection, Sluice against Caddy (Debian's nginx 1.22 and h2o
# 2.2 have no HTTP/3).
#
# Each server (scripts/bench/sluice.toml.in, scripts/bench/peers/*.in; one worker, the same
# certificate and document root) is started in turn; scripts/idle_conns.py opens N connections
# (TLS with ALPN h2, preface, SETTINGS, one GET of the 14-byte file read to its end) and holds
# them idle. The resident
# set of the server's whole process tree (VmRSS of every process, nginx's master and worker
# included) is read before (after one warm-up connection) and SETTLE_SECS (default 10) after
# all N are open (allocators hand freed pages back with a delay). With --quic the client is
# scripts/idle_quic.py (aioquic: QUIC handshake with ALPN h3, one GET read to its end, then
# a PING every 10 s so the server's idle timeout does not end it; one UDP socket each):
#   kB per idle connection = (RSS with N open - RSS before) / N
# The kernel's socket memory is not in RSS and is the same for every server.
#
# Usage: scripts/bench-idle.sh [-n N] [--runs R] [--servers sluice,nginx,h2o] [--quic] [--no-build] [--keep]
#   -n N          idle connections (default 10000)
#   --runs R      runs per server, medians reported (default 1)
#   --quic        HTTP/3 connections; servers default to sluice,caddy
# Env: SLUICE_BIN (another sluice binary).
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=bench/lib.sh
. "$REPO/scripts/bench/lib.sh"
BENCH=$REPO/scripts/bench
N=10000
RUNS=1
SERVERS=
QUIC=0
BUILD=1
KEEP=0

log() { printf 'bench-idle: %s\n' "$*" >&2; }
die() { printf 'bench-idle: ERROR: %s\n' "$*" >&2; exit 1; }

while [ $# -gt 0 ]; do
  case "$1" in
    -n) N=${2:?-n needs a number}; shift 2 ;;
    --runs) RUNS=${2:?--runs needs a number}; shift 2 ;;
    --servers) SERVERS=${2:?--servers needs a list}; shift 2 ;;
    --quic) QUIC=1; shift ;;
    --no-build) BUILD=0; shift ;;
    --keep) KEEP=1; shift ;;
    -h | --help) sed -n '2,22p' "$0"; exit 0 ;;
    *) die "unknown argument: $1 (see --help)" ;;
  esac
done
[[ "$N" =~ ^[1-9][0-9]*$ ]] || die "-n must be a positive integer"
if [ -z "$SERVERS" ]; then
  if [ "$QUIC" = 1 ]; then SERVERS=sluice,caddy; else SERVERS=sluice,nginx,h2o; fi
fi
if [ "$QUIC" = 1 ]; then
  python3 -c 'import aioquic' 2>/dev/null || die "aioquic not found (run scripts/setup.sh)"
fi
[[ "$RUNS" =~ ^[1-9][0-9]*$ ]] || die "--runs must be a positive integer"
for t in python3 openssl curl; do
  command -v "$t" >/dev/null 2>&1 || die "$t not found (run scripts/setup.sh)"
done
# Each end (its own process) holds N descriptors.
ulimit -n $((N + 1000)) 2>/dev/null || die "cannot raise the open-file limit to $((N + 1000)) (hard limit: $(ulimit -Hn))"

SLUICE=${SLUICE_BIN:-$REPO/target/release/sluice}
if [ -z "${SLUICE_BIN:-}" ] && [ "$BUILD" -eq 1 ] && [[ ",$SERVERS," == *,sluice,* ]]; then
  log "building sluice (cargo build --release -p sluice)"
  (cd "$REPO" && cargo build --release -p sluice) >&2 || die "cargo build failed"
fi
NGINX=$(command -v nginx || echo /usr/sbin/nginx)

TMP=$(mktemp -d "${TMPDIR:-/tmp}/sluice-idle.XXXXXX")
SERVER_PID=
CLIENT_PID=
cleanup() {
  [ -n "$CLIENT_PID" ] && kill "$CLIENT_PID" 2>/dev/null || true
  [ -n "$SERVER_PID" ] && kill "$SERVER_PID" 2>/dev/null && wait "$SERVER_PID" 2>/dev/null || true
  if [ "$KEEP" -eq 1 ]; then log "kept $TMP"; else rm -rf "$TMP"; fi
}
trap cleanup EXIT
chmod 755 "$TMP"
ROOT=$TMP/www
mkdir -p "$ROOT" "$TMP/sluice/data" "$TMP/nginx" "$TMP/h2o" "$TMP/caddy" "$TMP/results"
printf 'Hello, world!\n' >"$ROOT/hello.txt"
chmod 644 "$ROOT/hello.txt"
CERT=$TMP/cert.pem KEY=$TMP/key.pem
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 -subj /CN=localhost \
  -addext "subjectAltName=DNS:localhost,IP:127.0.0.1" -keyout "$KEY" -out "$CERT" 2>"$TMP/openssl.log" ||
  die "openssl failed"
chmod 644 "$KEY" "$CERT"

fill() {
  sed -e "s|@TMP@|$TMP|g" -e "s|@PORT@|$2|g" -e "s|@CERT@|$CERT|g" -e "s|@KEY@|$KEY|g" -e "s|@ROOT@|$ROOT|g" "$1"
}

# tree_rss PID: kB resident in PID and all its descendants.
tree_rss() {
  local pids=$1 p kids total=0
  kids=$1
  while [ -n "$kids" ]; do
    local next=""
    for p in $kids; do next="$next $(cat /proc/"$p"/task/*/children 2>/dev/null)"; done
    kids=$(echo $next)
    pids="$pids $kids"
  done
  for p in $pids; do
    total=$((total + $(awk '/^VmRSS:/ {print $2}' /proc/"$p"/status 2>/dev/null || echo 0)))
  done
  echo "$total"
}

start_server() {
  local name=$1 port=$2
  case "$name" in
    sluice)
      fill "$BENCH/sluice.toml.in" "$port" >"$TMP/sluice/sluice.toml"
      printf '\n[limits]\nmax_connections = %d\n' $((N + 100)) >>"$TMP/sluice/sluice.toml"
      "$SLUICE" serve --config "$TMP/sluice/sluice.toml" >"$TMP/sluice/server.log" 2>&1 &
      ;;
    nginx)
      static_peer nginx.conf.in "$TMP/nginx" "$port" CONNECTIONS=$((N + 100)) |
        sed -e "s|^worker_processes 1;|worker_processes 1;\nworker_rlimit_nofile $((N * 2 + 200));|" >"$TMP/nginx/nginx.conf"
      "$NGINX" -p "$TMP/nginx/" -e "$TMP/nginx/error.log" -c "$TMP/nginx/nginx.conf" >"$TMP/nginx/server.log" 2>&1 &
      ;;
    h2o)
      static_peer h2o.conf.in "$TMP/h2o" "$port" >"$TMP/h2o/h2o.conf"
      printf 'max-connections: %d\n' $((N + 100)) >>"$TMP/h2o/h2o.conf"
      h2o -c "$TMP/h2o/h2o.conf" >"$TMP/h2o/server.log" 2>&1 &
      ;;
    caddy)
      static_peer Caddyfile.in "$TMP/caddy" "$port" H3 >"$TMP/caddy/Caddyfile"
      HOME=$TMP/caddy XDG_DATA_HOME=$TMP/caddy/data XDG_CONFIG_HOME=$TMP/caddy/config \
        caddy run --config "$TMP/caddy/Caddyfile" --adapter caddyfile >"$TMP/caddy/server.log" 2>&1 &
      ;;
  esac
  SERVER_PID=$!
  local i
  for ((i = 0; i < 100; i++)); do
    curl -sk --http2 --max-time 2 "https://127.0.0.1:$port/hello.txt" >/dev/null 2>&1 && return 0
    kill -0 "$SERVER_PID" 2>/dev/null || break
    sleep 0.1
  done
  tail -5 "$TMP/$name/server.log" "$TMP/$name/error.log" 2>/dev/null >&2 || true
  die "$name did not start"
}

run_one() {
  local name=$1 run=$2 port before after ready
  port=$(free_port)
  start_server "$name" "$port"
  sleep 1
  before=$(tree_rss "$SERVER_PID")
  local client=idle_conns.py
  [ "$QUIC" = 1 ] && client=idle_quic.py
  coproc CLIENT { exec python3 "$REPO/scripts/$client" 127.0.0.1 "$port" "$N" --open-secs 300 --hold-secs 600 2>"$TMP/$name/client-$run.log"; }
  read -r -t 330 word ready <&"${CLIENT[0]}" || die "$name: the client did not report (log: $(tail -2 "$TMP/$name/client-$run.log"))"
  [ "$word" = ready ] || die "$name: the client said '$word $ready'"
  sleep "${SETTLE_SECS:-10}"
  after=$(tree_rss "$SERVER_PID")
  kill "$CLIENT_PID" 2>/dev/null || true
  wait "$CLIENT_PID" 2>/dev/null || true
  CLIENT_PID=
  kill "$SERVER_PID" 2>/dev/null || true
  wait "$SERVER_PID" 2>/dev/null || true
  SERVER_PID=
  if [ "$ready" -ne "$N" ]; then
    log "$name run $run: only $ready of $N connections opened ($(tail -1 "$TMP/$name/client-$run.log"))"
    return 1
  fi
  awk -v a="$after" -v b="$before" -v n="$N" 'BEGIN { printf "%.2f\n", (a - b) / n }' >>"$TMP/results/$name"
  log "$name run $run: RSS $before -> $after kB with $N idle connections: $(tail -1 "$TMP/results/$name") kB each"
}

IFS=, read -r -a ACTIVE <<<"$SERVERS"
for name in "${ACTIVE[@]}"; do
  case "$name" in
    sluice) [ -x "$SLUICE" ] || die "no sluice binary at $SLUICE"; require_shipped_build "$SLUICE" ;;
    nginx) [ -x "$NGINX" ] || die "nginx not found (run scripts/setup.sh)" ;;
    h2o) command -v h2o >/dev/null || die "h2o not found (run scripts/setup.sh)" ;;
    caddy) command -v caddy >/dev/null || die "caddy not found (run scripts/setup.sh)" ;;
    *) die "unknown server: $name" ;;
  esac
done
for ((run = 1; run <= RUNS; run++)); do
  for name in "${ACTIVE[@]}"; do run_one "$name" "$run" || true; done
done

echo
echo "### Memory per idle $([ "$QUIC" = 1 ] && echo "HTTP/3 (QUIC)" || echo "TLS h2") connection, $N connections ($RUNS runs, $(date -u +%Y-%m-%d))"
echo
echo "| server | kB per connection, median | min–max |"
echo "|---|---|---|"
for name in "${ACTIVE[@]}"; do
  [ -s "$TMP/results/$name" ] || { echo "| $name | n/a | n/a |"; continue; }
  sort -g "$TMP/results/$name" | awk -v n="$name" '{ v[NR] = $1 } END {
    m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
    printf "| %s | %.1f | %.1f–%.1f |\n", n, m, v[1], v[NR] }'
done
