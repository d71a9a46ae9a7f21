#!/usr/bin/env bash
# Benchmark (not a test): h2load against Sluice, h2o and nginx (Debian packages), side by side.
#
#   (a) small: 100,000 requests for a 14-byte file, h2load -n 100000 -c 10 -m 10, TLS h2
#   (b) large: 20 downloads of a 100 MB file, one after another (h2load -n 20 -c 1 -m 1), TLS h2
#   (c) small over TLS HTTP/1.1 keep-alive: the 14-byte file, h2load --h1 -n 100000 -c 10 -m 1
#
# Each server runs pinned to core 0 (taskset -c 0) with one worker (h2o num-threads: 1, nginx
# worker_processes 1; Sluice as built), h2load pinned to core 1. All three serve the same
# document root with the same self-signed certificate (made here with openssl). Every run
# starts each server in turn, the order rotating run by run; the result is a Markdown table of
# medians and min–max over the runs plus the Sluice/h2o and Sluice/nginx ratios. req/s is
# h2load's; MB/s is the response data (10^6 bytes) divided by h2load's elapsed time. For (a)
# and (c) it also reports the server's CPU time per request (µs, user + system, every thread of
# the server and its child processes, from /proc/PID/task/*/schedstat before and after the
# run): on this shared machine req/s moves with the load of other tenants, CPU per request
# much less.
#
# Usage: scripts/bench-peers.sh [--runs N] [--servers sluice,h2o,nginx] [--no-build] [--keep]
#   --runs N      runs per server (default 3)
#   --servers L   comma-separated subset, in first-run order (default sluice,h2o,nginx); also
#                 sluice-nometrics (Sluice with [admin] enabled = false: no metrics counted),
#                 for the cost of the metrics side by side
#   --no-build    use target/release/sluice as it is (default: cargo build --release -p sluice)
#   --no-large    skip (b), the 100 MB downloads (small-response work: about a third of the time)
#   --keep        keep the temp dir (configs, logs, raw h2load output)
# Env: SLUICE_BIN (another sluice binary), H2LOAD_TIMEOUT (seconds per h2load run, default 300).
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BENCH=$REPO/scripts/bench
# shellcheck source=bench/lib.sh
. "$BENCH/lib.sh"
RUNS=3
SERVERS=sluice,h2o,nginx
BUILD=1
KEEP=0
LARGE=1
H2LOAD_TIMEOUT=${H2LOAD_TIMEOUT:-300}
SMALL_N=100000
LARGE_N=20
LARGE_BYTES=100000000

log() { printf 'bench: %s\n' "$*" >&2; }
die() { printf 'bench: ERROR: %s\n' "$*" >&2; exit 1; }

while [ $# -gt 0 ]; do
  case "$1" in
    --runs) RUNS=${2:?--runs needs a number}; shift 2 ;;
    --runs=*) RUNS=${1#--runs=}; shift ;;
    --servers) SERVERS=${2:?--servers needs a list}; shift 2 ;;
    --servers=*) SERVERS=${1#--servers=}; shift ;;
    --no-build) BUILD=0; shift ;;
    --no-large) LARGE=0; shift ;;
    --keep) KEEP=1; shift ;;
    -h | --help) sed -n '2,24p' "$0"; exit 0 ;;
    *) die "unknown argument: $1 (see --help)" ;;
  esac
done
[[ "$RUNS" =~ ^[1-9][0-9]*$ ]] || die "--runs must be a positive integer, not '$RUNS'"

# --- tools and servers --------------------------------------------------------------------
for t in h2load openssl curl; do
  command -v "$t" >/dev/null 2>&1 || die "$t not found (run scripts/setup.sh)"
done
PIN_SERVER=() PIN_CLIENT=()
if command -v taskset >/dev/null 2>&1 && [ "$(nproc)" -ge 2 ]; then
  PIN_SERVER=(taskset -c 0) PIN_CLIENT=(taskset -c 1)
else
  log "WARNING: fewer than 2 cores or no taskset: server and client are NOT pinned; figures are not comparable"
fi

SLUICE=${SLUICE_BIN:-$REPO/target/release/sluice}
NGINX=$(command -v nginx || echo /usr/sbin/nginx)
declare -a ACTIVE=()
IFS=, read -r -a WANTED <<<"$SERVERS"
for s in "${WANTED[@]}"; do
  case "$s" in
    sluice | sluice-nometrics)
      if [ -z "${SLUICE_BIN:-}" ] && [ "$BUILD" -eq 1 ] && [ ! -x "$SLUICE" ]; then
        log "building sluice (cargo build --release -p sluice)"
        (cd "$REPO" && cargo build --release -p sluice) >&2 || die "cargo build failed"
      fi
      if [ -x "$SLUICE" ]; then require_shipped_build "$SLUICE"; ACTIVE+=("$s"); else log "SKIP $s: $SLUICE not found"; fi
      ;;
    h2o)
      if command -v h2o >/dev/null 2>&1; then ACTIVE+=(h2o); else log "SKIP h2o: not installed (scripts/setup.sh)"; fi
      ;;
    nginx)
      if [ -x "$NGINX" ]; then ACTIVE+=(nginx); else log "SKIP nginx: not installed (scripts/setup.sh)"; fi
      ;;
    *) die "unknown server '$s' (sluice, sluice-nometrics, h2o, nginx)" ;;
  esac
done
[ "${#ACTIVE[@]}" -gt 0 ] || die "no server to benchmark"

# --- workspace ----------------------------------------------------------------------------
TMP=$(mktemp -d "${TMPDIR:-/tmp}/sluice-bench.XXXXXX")
SERVER_PID=""
stop_server() {
  [ -n "$SERVER_PID" ] || return 0
  if kill -0 "$SERVER_PID" 2>/dev/null; then
    kill -TERM "$SERVER_PID" 2>/dev/null || true
    for _ in $(seq 100); do kill -0 "$SERVER_PID" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$SERVER_PID" 2>/dev/null || true
  fi
  wait "$SERVER_PID" 2>/dev/null || true
  SERVER_PID=""
}
cleanup() {
  stop_server
  if [ "$KEEP" -eq 1 ]; then log "kept $TMP"; else rm -rf "$TMP"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# h2o and nginx drop root privileges to nobody: everything they read must be world-readable.
chmod 755 "$TMP"
ROOT=$TMP/www
mkdir -p "$ROOT" "$TMP/results" "$TMP/h2o" "$TMP/nginx" "$TMP/sluice/data" "$TMP/sluice-nometrics"
printf 'Hello, world!\n' >"$ROOT/hello.txt" # 14 bytes
head -c "$LARGE_BYTES" /dev/zero >"$ROOT/large.bin"
chmod 644 "$ROOT"/*
CERT=$TMP/cert.pem KEY=$TMP/key.pem
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 \
  -subj /CN=localhost -addext "subjectAltName=DNS:localhost,IP:127.0.0.1" \
  -keyout "$KEY" -out "$CERT" 2>"$TMP/openssl.log" || { cat "$TMP/openssl.log" >&2; die "openssl failed"; }
chmod 644 "$KEY" "$CERT"

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

# fill TEMPLATE PORT > FILE (Sluice's; the peers' are static_peer's, scripts/bench/lib.sh)
fill() {
  sed -e "s|@TMP@|$TMP|g" -e "s|@PORT@|$2|g" -e "s|@CERT@|$CERT|g" -e "s|@KEY@|$KEY|g" -e "s|@ROOT@|$ROOT|g" "$1"
}

# start_server NAME PORT: starts it pinned to core 0 in the background, sets SERVER_PID.
start_server() {
  local name=$1 port=$2 logf=$TMP/$1/server.log
  case "$name" in
    sluice)
      { fill "$BENCH/sluice.toml.in" "$port"; printf '\n[admin]\naddr = "127.0.0.1:%s"\n' "$(free_port)"; } >"$TMP/sluice/sluice.toml"
      "${PIN_SERVER[@]}" "$SLUICE" serve --config "$TMP/sluice/sluice.toml" >"$logf" 2>&1 &
      ;;
    sluice-nometrics)
      { fill "$BENCH/sluice.toml.in" "$port"; printf '\n[admin]\nenabled = false\n'; } >"$TMP/sluice-nometrics/sluice.toml"
      "${PIN_SERVER[@]}" "$SLUICE" serve --config "$TMP/sluice-nometrics/sluice.toml" >"$logf" 2>&1 &
      ;;
    h2o)
      static_peer h2o.conf.in "$TMP/h2o" "$port" >"$TMP/h2o/h2o.conf"
      "${PIN_SERVER[@]}" h2o -c "$TMP/h2o/h2o.conf" >"$logf" 2>&1 &
      ;;
    nginx)
      static_peer nginx.conf.in "$TMP/nginx" "$port" >"$TMP/nginx/nginx.conf"
      "${PIN_SERVER[@]}" "$NGINX" -p "$TMP/nginx/" -e "$TMP/nginx/error.log" -c "$TMP/nginx/nginx.conf" >"$logf" 2>&1 &
      ;;
  esac
  SERVER_PID=$!
  local i
  for ((i = 0; i < 200; i++)); do
    if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then return 0; fi
    if ! kill -0 "$SERVER_PID" 2>/dev/null; then break; fi
    sleep 0.1
  done
  log "$name did not start listening on $port; its log:"
  cat "$logf" "$TMP/$name/error.log" 2>/dev/null >&2 || true
  stop_server
  return 1
}

# tree_cpu_ns PID: nanoseconds on CPU of every thread of PID and of its descendants (nginx's
# worker is a child of its master).
tree_cpu_ns() {
  local pids p
  pids=$({ cat /proc/[0-9]*/stat 2>/dev/null || true; } | awk -v root="$1" '
    {
      pid = $1; rest = $0; sub(/^.*\) /, "", rest); split(rest, f, " "); parent[pid] = f[2]
    }
    END {
      for (p in parent) {
        q = p
        for (d = 0; d < 64 && q > 0; d++) { if (q == root) { print p; break }; q = parent[q] }
      }
    }')
  for p in $pids; do cat /proc/"$p"/task/*/schedstat 2>/dev/null || true; done | awk '{ t += $1 } END { printf "%d\n", t }'
}

# h2load_cpu OUT N ARGS...: as h2load_run (N requests), then the server's CPU µs per request.
h2load_cpu() {
  local out=$1 n=$2 c0 c1 res
  shift 2
  c0=$(tree_cpu_ns "$SERVER_PID")
  res=$(h2load_run "$out" -n "$n" "$@") || return 1
  c1=$(tree_cpu_ns "$SERVER_PID")
  echo "$res $(awk -v a="$c0" -v b="$c1" -v n="$n" 'BEGIN { printf "%.3f", (b - a) / 1e3 / n }')"
}

# h2load_run OUT ARGS...: h2load pinned to core 1, bounded; prints "req/s MB/s" or fails.
h2load_run() {
  local out=$1 expect rc=0
  shift
  "${PIN_CLIENT[@]}" timeout "$H2LOAD_TIMEOUT" h2load "$@" >"$out" 2>&1 || rc=$?
  expect=$(awk '{ for (i = 1; i <= NF; i++) if ($i == "-n") print $(i + 1) }' <<<"$*")
  if [ "$rc" -ne 0 ]; then
    log "h2load $* exited $rc$([ "$rc" -eq 124 ] && echo " (timeout ${H2LOAD_TIMEOUT}s)")"
    tail -n 5 "$out" >&2
    return 1
  fi
  if ! grep -q "^requests: $expect total, $expect started, $expect done, $expect succeeded, 0 failed" "$out"; then
    log "h2load $*: not all requests succeeded:"
    grep -E '^(requests|status codes):' "$out" >&2 || tail -n 5 "$out" >&2
    return 1
  fi
  local want=h2
  [[ " $* " == *" --h1 "* ]] && want=http/1.1
  grep -q "^Application protocol: $want\$" "$out" || { log "h2load did not negotiate $want"; return 1; }
  awk '
    /^finished in / {
      t = $3; sub(/,$/, "", t)
      if (t ~ /ms$/) secs = substr(t, 1, length(t) - 2) / 1e3
      else if (t ~ /us$/) secs = substr(t, 1, length(t) - 2) / 1e6
      else if (t ~ /s$/) secs = substr(t, 1, length(t) - 1)
      rps = $4
    }
    /^traffic: / { for (i = 1; i <= NF; i++) if ($(i + 1) == "data") { d = $i; gsub(/[()]/, "", d) } }
    END { if (secs > 0 && rps != "") printf "%s %.2f\n", rps, d / secs / 1e6; else exit 1 }
  ' "$out"
}

# bench_one NAME RUN: one run of (a) and (b) against NAME; appends to results/NAME.{small,large}.
bench_one() {
  local name=$1 run=$2 port base small large h1 body
  port=$(free_port)
  base=https://127.0.0.1:$port
  start_server "$name" "$port" || return 1
  body=$(curl -sS -k --noproxy '*' --max-time 10 "$base/hello.txt" 2>&1) || true
  if [ "$body" != "Hello, world!" ]; then
    log "$name: GET /hello.txt answered '$body'"
    stop_server
    return 1
  fi
  # Warm-up: TLS, page cache, allocator.
  h2load_run "$TMP/$name/warmup.txt" -n 2000 -c 10 -m 10 "$base/hello.txt" >/dev/null || { stop_server; return 1; }
  small=$(h2load_cpu "$TMP/$name/small-$run.txt" "$SMALL_N" -c 10 -m 10 "$base/hello.txt") || { stop_server; return 1; }
  h1=$(h2load_cpu "$TMP/$name/h1-$run.txt" "$SMALL_N" --h1 -c 10 -m 1 "$base/hello.txt") || { stop_server; return 1; }
  large="n/a n/a"
  if [ "$LARGE" -eq 1 ]; then
    large=$(h2load_run "$TMP/$name/large-$run.txt" -n "$LARGE_N" -c 1 -m 1 "$base/large.bin") || { stop_server; return 1; }
    echo "${large#* }" >>"$TMP/results/$name.large"
  fi
  stop_server
  # small and h1 are "req/s MB/s cpu-µs".
  echo "${small%% *}" >>"$TMP/results/$name.small"
  echo "${small##* }" >>"$TMP/results/$name.small.cpu"
  echo "${h1%% *}" >>"$TMP/results/$name.h1"
  echo "${h1##* }" >>"$TMP/results/$name.h1.cpu"
  log "run $run $name: (a) ${small%% *} req/s, ${small##* } CPU µs/req   (b) ${large#* } MB/s   (c) ${h1%% *} req/s, ${h1##* } CPU µs/req"
}

# stats FILE: "median min max" of the numbers in FILE (empty when none).
stats() {
  [ -s "$1" ] || return 0
  sort -g "$1" | awk '{ v[NR] = $1 } END {
    m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
    printf "%.2f %.2f %.2f\n", m, v[1], v[NR] }'
}

# --- runs ---------------------------------------------------------------------------------
n=${#ACTIVE[@]}
log "servers: ${ACTIVE[*]}; runs: $RUNS; pinning: ${PIN_SERVER[*]:-none} (server) / ${PIN_CLIENT[*]:-none} (h2load)"
log "expected duration: about $((RUNS * n * 20))-$((RUNS * n * 45)) s ($RUNS runs x $n servers x 20-45 s; each h2load is capped at ${H2LOAD_TIMEOUT}s)"
failures=0
t0=$(date +%s)
for ((run = 1; run <= RUNS; run++)); do
  for ((k = 0; k < n; k++)); do
    name=${ACTIVE[$(((run - 1 + k) % n))]}
    bench_one "$name" "$run" || { failures=$((failures + 1)); log "run $run $name FAILED (left out of the figures)"; }
  done
done
log "finished in $(($(date +%s) - t0)) s"

# --- report -------------------------------------------------------------------------------
describe() { # describe "median min max" → "median | min–max"
  if [ -n "$1" ]; then
    read -r med lo hi <<<"$1"
    printf '%s | %s–%s' "$med" "$lo" "$hi"
  else
    printf 'n/a | n/a'
  fi
}
ratio() { # ratio A B → A/B with 2 decimals, or n/a
  if [ -n "$1" ] && [ -n "$2" ]; then awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f", a / b; else printf "n/a" }'; else printf 'n/a'; fi
}
declare -A MED_SMALL=() MED_LARGE=() MED_H1=() MED_SCPU=() MED_HCPU=() COUNT=()
echo
echo "### h2load, TLS h2, server on core 0, client on core 1 ($RUNS runs, $(date -u +%Y-%m-%d))"
echo
echo "(a) $SMALL_N requests for a 14-byte file, -c 10 -m 10; (b) $LARGE_N sequential downloads of $((LARGE_BYTES / 1000000)) MB, -c 1 -m 1$([ "$LARGE" -eq 1 ] || echo " (skipped: --no-large)"); (c) (a) over TLS HTTP/1.1 keep-alive, --h1 -c 10 -m 1."
echo
echo "| server | runs | (a) req/s median | (a) req/s min–max | (a) CPU µs/req median | (a) CPU min–max | (b) MB/s median | (b) MB/s min–max | (c) h1 req/s median | (c) min–max | (c) CPU µs/req median | (c) CPU min–max |"
echo "|---|---|---|---|---|---|---|---|---|---|---|---|"
for name in "${ACTIVE[@]}"; do
  s=$(stats "$TMP/results/$name.small")
  l=$(stats "$TMP/results/$name.large")
  h=$(stats "$TMP/results/$name.h1")
  sc=$(stats "$TMP/results/$name.small.cpu")
  hc=$(stats "$TMP/results/$name.h1.cpu")
  MED_SCPU[$name]=${sc%% *}
  MED_HCPU[$name]=${hc%% *}
  MED_SMALL[$name]=${s%% *}
  MED_LARGE[$name]=${l%% *}
  MED_H1[$name]=${h%% *}
  COUNT[$name]=$( [ -s "$TMP/results/$name.small" ] && wc -l <"$TMP/results/$name.small" || echo 0)
  echo "| $name | ${COUNT[$name]} | $(describe "$s") | $(describe "$sc") | $(describe "$l") | $(describe "$h") | $(describe "$hc") |"
done
echo
if [ -n "${MED_SMALL[sluice]+x}" ]; then
  for peer in sluice-nometrics h2o nginx; do
    [ -n "${MED_SMALL[$peer]+x}" ] || continue
    echo "- Sluice/$peer: (a) req/s $(ratio "${MED_SMALL[sluice]}" "${MED_SMALL[$peer]}")x, CPU per request $(ratio "${MED_SCPU[sluice]}" "${MED_SCPU[$peer]}")x; (b) MB/s $(ratio "${MED_LARGE[sluice]}" "${MED_LARGE[$peer]}")x; (c) h1 req/s $(ratio "${MED_H1[sluice]}" "${MED_H1[$peer]}")x, CPU per request $(ratio "${MED_HCPU[sluice]}" "${MED_HCPU[$peer]}")x (ratios of medians)"
  done
else
  echo "- Sluice not measured: no ratios."
fi
if [ "$failures" -gt 0 ]; then
  echo "- $failures run(s) failed and are left out (rerun with --keep for logs)."
  exit 1
fi
