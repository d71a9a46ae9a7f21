#!/usr/bin/env bash
# Benchmark (not a test): instructions per request, counted by callgrind, for Sluice, h2o and
# nginx serving a 14-byte static file. Instruction counts do not depend on the machine's load,
# so unlike req/s they compare across noisy runs.
#
# Each server runs under `valgrind --tool=callgrind --trace-children=yes` (nginx's worker and
# every Sluice and h2o thread included) twice: once for N0 requests and once for N0 + N, both
# from h2load with the same connections (-c 10; -m 10 over TLS h2, or HTTP/1.1 keep-alive with
# --h1 and -m 1). Start-up, TLS handshakes and shutdown are the same in both runs, so
#   instructions per request = (Ir(N0 + N) - Ir(N0)) / N
# where Ir is the sum of every process's total. Configurations are scripts/bench/sluice.toml.in and
# the peers' templates in scripts/bench/peers/, as for scripts/bench-peers.sh (one worker each, the
# same certificate and document root).
#
# Usage: scripts/bench-callgrind.sh [--servers sluice,h2o,nginx] [--proto h2|h1] [-n N]
#                                    [--repeat R] [--no-build] [--keep]
#   --servers L   comma-separated subset (default sluice,h2o,nginx); also sluice-proxy,
#                 h2o-proxy and haproxy-proxy: that server as a reverse proxy (the
#                 configurations of scripts/bench-proxy.sh: scripts/bench/proxy/sluice.toml.in,
#                 scripts/bench/peers/*.in) to an nginx
#                 origin (scripts/bench/proxy/origin-nginx.conf.in, cleartext HTTP/1.1
#                 keep-alive, run outside valgrind so that only the proxy is counted)
#   --proto P     h2 (TLS, h2load -m 10; default) or h1 (TLS HTTP/1.1 keep-alive, h2load --h1)
#   -n N          requests counted (default 20000; N0 = 2000)
#   --repeat R    measure each server R times (default 1) and add a row with the median and
#                 the range. Counts move between runs with how a server's event loop batches
#                 the ten streams under valgrind: on 2026-11-29 Sluice's by under 2 % (8,928 to
#                 9,086), h2o's by a third (6,487 to 9,588), so compare medians of several.
#   --atomics     also count atomic operations per request (instructions with a `lock` prefix,
#                 and `xchg` with memory: reference counts, locks, wake-ups; tens of cycles
#                 each), from profiles made with --dump-instr=yes, by
#                 scripts/bench/callgrind-atomics.py (needs objdump and nm); the functions with
#                 the most are in each run's directory of the temp dir (atomics.txt, --keep)
#   --no-build    use target/release/sluice as it is (default: cargo build --release -p sluice)
#   --keep        keep the temp dir (configs, logs, callgrind outputs)
# Env: SLUICE_BIN (another sluice binary).
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BENCH=$REPO/scripts/bench
# shellcheck source=bench/lib.sh
. "$BENCH/lib.sh"
SERVERS=sluice,h2o,nginx
PROTO=h2
N=20000
N0=2000
BUILD=1
KEEP=0
REPEAT=1
ATOMICS=0

log() { printf 'bench-callgrind: %s\n' "$*" >&2; }
die() { printf 'bench-callgrind: ERROR: %s\n' "$*" >&2; exit 1; }

while [ $# -gt 0 ]; do
  case "$1" in
    --servers) SERVERS=${2:?--servers needs a list}; shift 2 ;;
    --proto) PROTO=${2:?--proto needs h2 or h1}; shift 2 ;;
    -n) N=${2:?-n needs a number}; shift 2 ;;
    --repeat) REPEAT=${2:?--repeat needs a number}; shift 2 ;;
    --no-build) BUILD=0; shift ;;
    --atomics) ATOMICS=1; shift ;;
    --keep) KEEP=1; shift ;;
    -h | --help) sed -n '2,36p' "$0"; exit 0 ;;
    *) die "unknown argument: $1 (see --help)" ;;
  esac
done
[[ "$N" =~ ^[1-9][0-9]*$ ]] || die "-n must be a positive integer"
[[ "$REPEAT" =~ ^[1-9][0-9]*$ ]] || die "--repeat must be a positive integer"
case "$PROTO" in h2 | h1) ;; *) die "--proto is h2 or h1" ;; esac
TOOLS=(valgrind h2load openssl)
[ "$ATOMICS" -eq 1 ] && TOOLS+=(objdump nm python3)
for t in "${TOOLS[@]}"; do
  command -v "$t" >/dev/null 2>&1 || die "$t not found (run scripts/setup.sh)"
done

SLUICE=${SLUICE_BIN:-$REPO/target/release/sluice}
if [ -z "${SLUICE_BIN:-}" ] && [ "$BUILD" -eq 1 ] && [[ ",$SERVERS," == *,sluice,* || ",$SERVERS," == *,sluice-proxy,* ]]; then
  log "building sluice (cargo build --release -p sluice)"
  (cd "$REPO" && cargo build --release -p sluice) >&2 || die "cargo build failed"
fi
if [[ ",$SERVERS," == *,sluice,* || ",$SERVERS," == *,sluice-proxy,* ]]; then
  require_shipped_build "$SLUICE"
fi
NGINX=$(command -v nginx || echo /usr/sbin/nginx)

TMP=$(mktemp -d "${TMPDIR:-/tmp}/sluice-callgrind.XXXXXX")
SERVER_PID=""
ORIGIN_PID=""
stop_server() {
  if [ -n "$ORIGIN_PID" ]; then
    kill -TERM "$ORIGIN_PID" 2>/dev/null || true
    wait "$ORIGIN_PID" 2>/dev/null || true
    ORIGIN_PID=""
  fi
  [ -n "$SERVER_PID" ] || return 0
  stop_pid "$SERVER_PID"
  SERVER_PID=""
}
cleanup() {
  stop_server
  if [ "$KEEP" -eq 1 ]; then log "kept $TMP"; else rm -rf "$TMP"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

chmod 755 "$TMP"
ROOT=$TMP/www
mkdir -p "$ROOT" "$TMP/h2o" "$TMP/nginx" "$TMP/sluice/data"
printf 'Hello, world!\n' >"$ROOT/hello.txt" # 14 bytes
chmod 644 "$ROOT"/*
CERT=$TMP/cert.pem KEY=$TMP/key.pem
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 \
  -subj /CN=localhost -addext "subjectAltName=DNS:localhost,IP:127.0.0.1" \
  -keyout "$KEY" -out "$CERT" 2>"$TMP/openssl.log" || { cat "$TMP/openssl.log" >&2; die "openssl failed"; }
chmod 644 "$KEY" "$CERT"
# HAProxy takes the certificate and its key in one file.
cat "$CERT" "$KEY" >"$TMP/combined.pem"

fill() {
  sed -e "s|@TMP@|$TMP|g" -e "s|@PORT@|$2|g" -e "s|@CERT@|$CERT|g" -e "s|@KEY@|$KEY|g" -e "s|@ROOT@|$ROOT|g" "$1"
}

# start NAME PORT OUTDIR: the server under callgrind, in the background.
start() {
  local name=$1 port=$2 out=$3 logf=$3/server.log
  local vg=(valgrind --tool=callgrind --trace-children=yes "--callgrind-out-file=$out/callgrind.out.%p")
  [ "$ATOMICS" -eq 1 ] && vg+=(--dump-instr=yes)
  case "$name" in
    sluice)
      fill "$BENCH/sluice.toml.in" "$port" >"$TMP/sluice/sluice.toml"
      # HTTP/3 off: its UDP socket is not part of the comparison.
      printf '\n[quic]\nenabled = false\n' >>"$TMP/sluice/sluice.toml"
      "${vg[@]}" "$SLUICE" serve --config "$TMP/sluice/sluice.toml" >"$logf" 2>&1 &
      ;;
    sluice-proxy | h2o-proxy | haproxy-proxy)
      local op dir=$TMP/$name conf
      op=$(free_port)
      mkdir -p "$TMP/origin"/{body,proxy,fastcgi,uwsgi,scgi} "$dir/data"
      sed -e "s|@DIR@|$TMP/origin|g" -e "s|@ORIGIN@|127.0.0.1:$op|g" -e "s|@ROOT@|$ROOT|g" \
        "$BENCH/proxy/origin-nginx.conf.in" >"$TMP/origin/nginx.conf"
      "$NGINX" -p "$TMP/origin/" -e "$TMP/origin/error.log" -c "$TMP/origin/nginx.conf" >"$out/origin.log" 2>&1 &
      ORIGIN_PID=$!
      case "$name" in
        sluice-proxy) conf=sluice.toml ;;
        h2o-proxy) conf=h2o.conf ;;
        haproxy-proxy) conf=haproxy.cfg ;;
      esac
      case "$name" in
        sluice-proxy)
          sed -e "s|@DIR@|$dir|g" -e "s|@HOST@|127.0.0.1|g" -e "s|@PORT@|$port|g" -e "s|@LISTEN@|127.0.0.1:$port|g" \
            -e "s|@CERT@|$CERT|g" -e "s|@KEY@|$KEY|g" -e "s|@COMBINED@|$TMP/combined.pem|g" \
            -e "s|@ORIGIN@|127.0.0.1:$op|g" "$BENCH/proxy/$conf.in" >"$dir/$conf"
          ;;
        *) proxy_peer "$conf.in" "$dir" "$port" "127.0.0.1:$op" COMBINED="$TMP/combined.pem" >"$dir/$conf" ;;
      esac
      case "$name" in
        sluice-proxy) "${vg[@]}" "$SLUICE" serve --config "$dir/$conf" >"$logf" 2>&1 & ;;
        h2o-proxy)
          # No privilege drop, as for h2o above.
          [ "$(id -u)" -eq 0 ] && printf 'user: root\n' >>"$dir/$conf"
          "${vg[@]}" h2o -c "$dir/$conf" >"$logf" 2>&1 &
          ;;
        haproxy-proxy) "${vg[@]}" haproxy -db -f "$dir/$conf" >"$logf" 2>&1 & ;;
      esac
      ;;
    h2o)
      static_peer h2o.conf.in "$TMP/h2o" "$port" >"$TMP/h2o/h2o.conf"
      # No privilege drop: callgrind writes each profile at exit, into a file it opened as root.
      [ "$(id -u)" -eq 0 ] && printf 'user: root\n' >>"$TMP/h2o/h2o.conf"
      "${vg[@]}" h2o -c "$TMP/h2o/h2o.conf" >"$logf" 2>&1 &
      ;;
    nginx)
      { [ "$(id -u)" -eq 0 ] && echo 'user root;'; static_peer nginx.conf.in "$TMP/nginx" "$port"; } >"$TMP/nginx/nginx.conf"
      "${vg[@]}" "$NGINX" -p "$TMP/nginx/" -e "$TMP/nginx/error.log" -c "$TMP/nginx/nginx.conf" >"$logf" 2>&1 &
      ;;
  esac
  SERVER_PID=$!
  for _ in $(seq 1200); do
    if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then return 0; fi
    kill -0 "$SERVER_PID" 2>/dev/null || break
    sleep 0.1
  done
  log "$name did not start under valgrind; its log:"
  tail -n 20 "$logf" >&2 || true
  stop_server
  return 1
}

# load PORT COUNT OUT: h2load, bounded; fails unless every request succeeded.
load() {
  local port=$1 n=$2 out=$3 args=(-n "$2" -c 10)
  if [ "$PROTO" = h1 ]; then args+=(--h1 -m 1); else args+=(-m 10); fi
  timeout 900 h2load "${args[@]}" "https://127.0.0.1:$port/hello.txt" >"$out" 2>&1 ||
    { tail -n 5 "$out" >&2; return 1; }
  grep -q "^requests: $n total, $n started, $n done, $n succeeded, 0 failed" "$out" ||
    { grep -E '^(requests|status codes):' "$out" >&2; return 1; }
}

# atomics OUTDIR: atomic operations executed in every profile of OUTDIR (the functions with the
# most into OUTDIR/atomics.txt). Counted at once: the addresses are the binary's as it is now.
atomics() {
  python3 "$BENCH/callgrind-atomics.py" --top 40 "$1"/callgrind.out.* 2>"$1/atomics.txt"
}

# count NAME REQUESTS [RUN]: Ir of one whole server run that served REQUESTS (each run's
# outputs in a directory of their own: `callgrind_total` sums every profile in it), and with --atomics
# the atomic operations after it.
count() {
  local name=$1 n=$2 port out
  port=$(free_port)
  out=$TMP/$name-$n${3:+-run$3}
  mkdir -p "$out"
  chmod 1777 "$out"
  start "$name" "$port" "$out" || return 1
  if ! load "$port" "$n" "$out/h2load.txt"; then
    stop_server
    return 1
  fi
  stop_server
  if [ "$ATOMICS" -eq 1 ]; then
    echo "$(callgrind_total "$out") $(atomics "$out")"
  else
    callgrind_total "$out"
  fi
}

if [ "$ATOMICS" -eq 1 ]; then
  printf '| server | instructions per request (%s, 14-byte file) | atomic operations per request | Ir(%d) | Ir(%d) |\n' \
    "$PROTO" "$N0" "$((N0 + N))"
  printf '|---|---|---|---|---|\n'
else
  printf '| server | instructions per request (%s, 14-byte file) | Ir(%d) | Ir(%d) |\n' "$PROTO" "$N0" "$((N0 + N))"
  printf '|---|---|---|---|\n'
fi
IFS=, read -r -a WANTED <<<"$SERVERS"
for s in "${WANTED[@]}"; do
  case "$s" in
    sluice | sluice-proxy) [ -x "$SLUICE" ] || { log "SKIP $s: $SLUICE not found"; continue; } ;;
    h2o | h2o-proxy) command -v h2o >/dev/null 2>&1 || { log "SKIP $s: h2o not installed"; continue; } ;;
    haproxy-proxy) command -v haproxy >/dev/null 2>&1 || { log "SKIP $s: haproxy not installed"; continue; } ;;
    nginx) [ -x "$NGINX" ] || { log "SKIP nginx: not installed"; continue; } ;;
    *) die "unknown server '$s'" ;;
  esac
  per=()
  for r in $(seq "$REPEAT"); do
    label=$s
    [ "$REPEAT" -gt 1 ] && label="$s (run $r)"
    log "$label: $N0 requests under callgrind"
    run=
    [ "$REPEAT" -gt 1 ] && run=$r
    read -r a a_atomic <<<"$(count "$s" "$N0" "$run")" && [ -n "$a" ] || { log "$s failed"; continue; }
    log "$label: $((N0 + N)) requests under callgrind"
    read -r b b_atomic <<<"$(count "$s" "$((N0 + N))" "$run")" && [ -n "$b" ] || { log "$s failed"; continue; }
    v=$(awk -v a="$a" -v b="$b" -v n="$N" 'BEGIN { printf "%.0f", (b - a) / n }')
    per+=("$v")
    if [ "$ATOMICS" -eq 1 ]; then
      w=$(awk -v a="$a_atomic" -v b="$b_atomic" -v n="$N" 'BEGIN { printf "%.1f", (b - a) / n }')
      printf '| %s | %s | %s | %s | %s |\n' "$label" "$v" "$w" "$a" "$b"
    else
      printf '| %s | %s | %s | %s |\n' "$label" "$v" "$a" "$b"
    fi
  done
  if [ "$REPEAT" -gt 1 ] && [ "${#per[@]}" -gt 0 ]; then
    printf '%s\n' "${per[@]}" | sort -n | awk -v s="$s" '{ v[NR] = $1 } END {
      m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
      printf "| %s (median of %d) | %.0f | min %s | max %s |\n", s, NR, m, v[1], v[NR] }'
  fi
done
