#!/usr/bin/env bash
# Benchmark (not a test): Sluice as a reverse proxy beside nginx, h2o, Caddy and HAProxy
# (Debian packages), side by side in one run. Two parts:
#
# (1) throughput: h2load through each proxy to one origin, on loopback.
#   The origin is nginx (one worker, cleartext HTTP/1.1 with keep-alive, no access log) serving
#   a 14-byte small.txt and a 100,000-byte 100k.bin; it runs pinned to core 1 together with
#   h2load (taskset -c 1), so the two share that core. Each proxy runs pinned to core 0
#   (taskset -c 0) with one worker or thread (nginx worker_processes 1, h2o num-threads: 1,
#   Caddy GOMAXPROCS=1, HAProxy nbthread 1, Sluice as built: tokio sizes its pool from the
#   affinity mask), TLS with ALPN h2 downstream (one self-signed certificate made here with
#   openssl), HTTP/1.1 keep-alive upstream (configs: scripts/bench/proxy/*.in for Sluice and the
#   origin, scripts/bench/peers/*.in for the peers). For every run
#   each proxy is started afresh, the order rotating run by run, checked with curl (200 and the
#   exact bytes of both files over h2; a proxy that fails is reported and left out), warmed up
#   (2,000 requests), then measured:
#     small: h2load -n $SMALL_N (100000) -c 10 -m 10 .../small.txt
#     large: h2load -n $LARGE_N (20000)  -c 10 -m 10 .../100k.bin
#   Reported per proxy: h2load's req/s; the proxy's CPU seconds per 100,000 requests (utime +
#   stime of its whole process tree, master and workers, from /proc/PID/stat before and after
#   each h2load run, in getconf CLK_TCK ticks) and the system's share of it; system calls per
#   small request, counted in a run of SYSCALL_N (20000) small requests of its own after the
#   warm-up (perf stat -e raw_syscalls:sys_enter on the process tree, where perf may count
#   tracepoints, else n/a; untimed, as the tracepoint slows every call); responses that were not 2xx (h2load's failed,
#   errored and non-2xx, summed over the runs); the upstream connections the proxy opened
#   during the run (the origin's stub_status `accepts`). Medians and min–max over the runs, a
#   Markdown table, and the ratios of Sluice's medians to each peer's (h2o and HAProxy first).
#
# (2) keepalive: the keep-alive race of caddyserver/caddy#6452. An upstream closes an idle
#   keep-alive connection just as the proxy sends the next request on it; the proxy gets a
#   reset, and a request it must not retry (a POST that was written) becomes a 502. Sluice and
#   Caddy (reverse_proxy, default transport) each proxy to their own Node origin (Node's http
#   module, default keepAliveTimeout: it announces `Keep-Alive: timeout=5`; the Node here,
#   20.20, really closes an idle socket a second after that). Each origin answers every request
#   (GET and POST, body read) with 200 "ok" after KA_WORK_MS (2) ms of synchronous work, like
#   a real handler: on loopback the race window is otherwise microseconds wide, and it is a
#   busy event loop that lets a request sit unread while the idle timer fires. Downstream is
#   cleartext HTTP/1.1, a new connection per request. The script first measures after how
#   long the origin really closes an idle connection (CLOSE, about 6 s); then each client
#   sends KA_N (1000) requests, half POST with a 20-byte body and half GET, in bursts of
#   KA_LANES (50) one-at-a-time lanes: within a burst lane i sends at +i ms, and between
#   bursts the client pauses CLOSE - 0.10 + (b mod 21) x 0.01 s (b: the burst number), so that
#   burst after burst the proxy's pooled connections come back to use right around the
#   origin's close (a proxy reuses its most recent idle connection first, so evenly spread
#   requests would never find an old one). Both proxies run at once, each against its own
#   origin, about 20 x 6 s. Reported: requests, responses other than 200 "ok" (connection
#   errors included) for GET and for POST, and the connections and requests the origin saw.
#
# Usage: scripts/bench-proxy.sh [--only throughput|keepalive] [--runs N] [--proxies LIST]
#                               [--build | --no-build] [--keep]
#   --only P      run one part only (default: both, throughput first)
#   --runs N      throughput runs per proxy (default 5)
#   --proxies L   comma-separated subset, in first-run order (default sluice,nginx,h2o,caddy,haproxy;
#                 the keepalive part takes sluice and caddy from it)
#   --build       cargo build --release -p sluice first (default: use the binary as it is;
#                 --no-build says so explicitly)
#   --keep        keep the temp dir (configs, logs, raw h2load output)
# Env: SLUICE_BIN (default target/release/sluice), SMALL_N (100000), LARGE_N (20000),
#   SYSCALL_N (20000), KA_N (1000), KA_LANES (50), KA_WORK_MS (2), H2LOAD_TIMEOUT (seconds per
#   h2load run, 300).
# HAProxy, when missing, is installed with apt-get (as root only; otherwise it is skipped).
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=bench/lib.sh
. "$REPO/scripts/bench/lib.sh"
TPL=$REPO/scripts/bench/proxy
ONLY=all
RUNS=5
PROXIES=sluice,nginx,h2o,caddy,haproxy
BUILD=0
KEEP=0
H2LOAD_TIMEOUT=${H2LOAD_TIMEOUT:-300}
SMALL_N=${SMALL_N:-100000}
SYSCALL_N=${SYSCALL_N:-20000}
LARGE_N=${LARGE_N:-20000}
LARGE_BYTES=100000
KA_N=${KA_N:-1000}
KA_LANES=${KA_LANES:-50}
KA_WORK_MS=${KA_WORK_MS:-2}

log() { printf 'bench: %s\n' "$*" >&2; }
die() { printf 'bench: ERROR: %s\n' "$*" >&2; exit 1; }

while [ $# -gt 0 ]; do
  case "$1" in
    --only) ONLY=${2:?--only needs throughput or keepalive}; shift 2 ;;
    --only=*) ONLY=${1#--only=}; shift ;;
    --runs) RUNS=${2:?--runs needs a number}; shift 2 ;;
    --runs=*) RUNS=${1#--runs=}; shift ;;
    --proxies) PROXIES=${2:?--proxies needs a list}; shift 2 ;;
    --proxies=*) PROXIES=${1#--proxies=}; shift ;;
    --build) BUILD=1; shift ;;
    --no-build) BUILD=0; shift ;;
    --keep) KEEP=1; shift ;;
    -h | --help) sed -n '2,57p' "$0"; exit 0 ;;
    *) die "unknown argument: $1 (see --help)" ;;
  esac
done
case "$ONLY" in all | throughput | keepalive) ;; *) die "--only takes throughput or keepalive, not '$ONLY'" ;; esac
for v in RUNS SMALL_N LARGE_N KA_N KA_LANES; do
  [[ "${!v}" =~ ^[1-9][0-9]*$ ]] || die "$v must be a positive integer, not '${!v}'"
done
[[ "$KA_WORK_MS" =~ ^[0-9]+(\.[0-9]+)?$ ]] || die "KA_WORK_MS must be a number of milliseconds, not '$KA_WORK_MS'"
DO_TP=0 DO_KA=0
[ "$ONLY" = keepalive ] || DO_TP=1
[ "$ONLY" = throughput ] || DO_KA=1

# --- workspace ----------------------------------------------------------------------------
TMP=$(mktemp -d "${TMPDIR:-/tmp}/sluice-bench-proxy.XXXXXX")
# Every process this script starts runs in a session (and process group) of its own, made by
# setsid; their ids are kept here, and only those groups are ever signalled.
declare -a STARTED=()
stop_group() { # stop_group PID: TERM its process group, KILL it after 10 s
  local pid=$1 i
  if kill -0 "$pid" 2>/dev/null; then
    kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true
    for ((i = 0; i < 100; i++)); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null || true
  fi
  wait "$pid" 2>/dev/null || true
  local keep=() p
  for p in "${STARTED[@]}"; do [ "$p" = "$pid" ] || keep+=("$p"); done
  STARTED=("${keep[@]}")
}
# shellcheck disable=SC2317 # called by the EXIT trap
cleanup() {
  local p
  for p in "${STARTED[@]}"; do stop_group "$p"; done
  if [ "$KEEP" -eq 1 ]; then log "kept $TMP"; else rm -rf "$TMP"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# start LOG CMD...: starts CMD in the background in a new session; sets LAST_PID.
LAST_PID=""
start() {
  local logf=$1
  shift
  setsid "$@" >"$logf" 2>&1 </dev/null &
  LAST_PID=$!
  STARTED+=("$LAST_PID")
}

# wait_port PORT PID: until something listens on 127.0.0.1:PORT (10 s at most, while PID lives).
wait_port() {
  local i
  for ((i = 0; i < 100; i++)); do
    if (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; then return 0; fi
    kill -0 "$2" 2>/dev/null || return 1
    sleep 0.1
  done
  return 1
}


# --- tools --------------------------------------------------------------------------------
need=(python3 curl)
[ "$DO_TP" -eq 1 ] && need+=(h2load openssl nginx)
[ "$DO_KA" -eq 1 ] && need+=(node)
for t in "${need[@]}"; do
  command -v "$t" >/dev/null 2>&1 || die "$t not found (run scripts/setup.sh)"
done
PIN_SERVER=() PIN_CLIENT=()
if command -v taskset >/dev/null 2>&1 && [ "$(nproc)" -ge 2 ]; then
  PIN_SERVER=(taskset -c 0) PIN_CLIENT=(taskset -c 1)
else
  log "WARNING: fewer than 2 cores or no taskset: proxies, origin and h2load are NOT pinned; figures are not comparable"
fi
CLK_TCK=$(getconf CLK_TCK)
# System calls per request are counted with perf's syscall tracepoint where it can be read
# (root, or a permissive perf_event_paranoid); otherwise reported as n/a.
PERF_SYSCALLS=0
if command -v perf >/dev/null 2>&1 && perf stat -x, -e raw_syscalls:sys_enter -- true >/dev/null 2>&1; then
  PERF_SYSCALLS=1
else
  log "perf cannot count raw_syscalls:sys_enter here: system calls per request reported as n/a"
fi
# How busy the machine is before anything starts: percent of all cores over one second.
cpu_sample() { awk '/^cpu / { print $2 + $3 + $4 + $7 + $8 + $9, $5 + $6 }' /proc/stat; }
BUSY0=$(cpu_sample)
sleep 1
BUSY_START=$(awk -v a="$BUSY0" -v b="$(cpu_sample)" 'BEGIN {
  split(a, x, " "); split(b, y, " "); busy = y[1] - x[1]; idle = y[2] - x[2]
  printf "%.0f", (busy + idle > 0) ? 100 * busy / (busy + idle) : 0 }')
if [ "$BUSY_START" -gt 10 ]; then
  log "WARNING: the CPUs were ${BUSY_START}% busy before the start: other processes are running, figures will be noisy"
fi

SLUICE=${SLUICE_BIN:-$REPO/target/release/sluice}
if [ "$BUILD" -eq 1 ]; then
  [ -z "${SLUICE_BIN:-}" ] || die "--build and SLUICE_BIN exclude each other"
  log "building sluice (cargo build --release -p sluice)"
  (cd "$REPO" && cargo build --release -p sluice) >&2 || die "cargo build failed"
fi

declare -a ACTIVE=()
IFS=, read -r -a WANTED <<<"$PROXIES"
for s in "${WANTED[@]}"; do
  case "$s" in
    sluice)
      if [ -x "$SLUICE" ]; then require_shipped_build "$SLUICE"; ACTIVE+=(sluice); else log "SKIP sluice: $SLUICE not found (set SLUICE_BIN or use --build)"; fi
      ;;
    nginx | h2o | caddy)
      if command -v "$s" >/dev/null 2>&1; then ACTIVE+=("$s"); else log "SKIP $s: not installed (scripts/setup.sh)"; fi
      ;;
    haproxy)
      [ "$DO_TP" -eq 1 ] || continue
      if ! command -v haproxy >/dev/null 2>&1; then
        if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
          log "installing haproxy (apt-get install -y haproxy)"
          if ! DEBIAN_FRONTEND=noninteractive timeout 600 apt-get install -y -q haproxy >"$TMP/apt.log" 2>&1; then
            DEBIAN_FRONTEND=noninteractive timeout 600 apt-get update -q >>"$TMP/apt.log" 2>&1 || true
            DEBIAN_FRONTEND=noninteractive timeout 600 apt-get install -y -q haproxy >>"$TMP/apt.log" 2>&1 || tail -n 5 "$TMP/apt.log" >&2
          fi
        else
          log "haproxy is not installed and this is not root: not installing it"
        fi
      fi
      if command -v haproxy >/dev/null 2>&1; then ACTIVE+=(haproxy); else log "SKIP haproxy: not installed (apt-get install haproxy)"; fi
      ;;
    *) die "unknown proxy '$s' (sluice, nginx, h2o, caddy, haproxy)" ;;
  esac
done

version() {
  case "$1" in
    sluice) "$SLUICE" --version 2>&1 | head -n 1 ;;
    nginx) nginx -v 2>&1 | sed 's/^nginx version: //' ;;
    h2o) h2o --version 2>&1 | head -n 1 ;;
    caddy) echo "caddy $(caddy version 2>&1 | awk '{ print $1; exit }')" ;;
    haproxy) haproxy -v 2>&1 | awk 'NR == 1 { print $1, $2, $3 }' ;;
  esac
}

# fill TEMPLATE DIR LISTEN-PORT ORIGIN: the template with its placeholders filled in (Sluice's and
# the origin's; the peers' are proxy_peer's, scripts/bench/lib.sh).
fill() {
  sed -e "s|@DIR@|$2|g" -e "s|@HOST@|127.0.0.1|g" -e "s|@PORT@|$3|g" -e "s|@LISTEN@|127.0.0.1:$3|g" \
    -e "s|@ORIGIN@|$4|g" -e "s|@CERT@|${CERT:-}|g" -e "s|@KEY@|${KEY:-}|g" \
    -e "s|@COMBINED@|${COMBINED:-}|g" -e "s|@ROOT@|${ROOT:-}|g" "$1"
}

# start_proxy NAME VARIANT PORT ORIGIN: starts proxy NAME (VARIANT tp: TLS, pinned to core 0;
# ka: cleartext, not pinned) with its configuration from the templates; sets PROXY_PID.
PROXY_PID=""
start_proxy() {
  local name=$1 variant=$2 port=$3 origin=$4 dir=$TMP/$2-$1 pin=()
  mkdir -p "$dir"
  [ "$variant" = tp ] && pin=("${PIN_SERVER[@]}")
  case "$name:$variant" in
    sluice:tp | sluice:ka)
      fill "$TPL/$([ "$variant" = tp ] && echo sluice.toml.in || echo sluice-ka.toml.in)" "$dir" "$port" "$origin" >"$dir/sluice.toml"
      start "$dir/server.log" "${pin[@]}" "$SLUICE" serve --config "$dir/sluice.toml"
      ;;
    nginx:tp)
      proxy_peer nginx.conf.in "$dir" "$port" "$origin" >"$dir/nginx.conf"
      start "$dir/server.log" "${pin[@]}" nginx -p "$dir/" -e "$dir/error.log" -c "$dir/nginx.conf"
      ;;
    h2o:tp)
      proxy_peer h2o.conf.in "$dir" "$port" "$origin" >"$dir/h2o.conf"
      start "$dir/server.log" "${pin[@]}" h2o -c "$dir/h2o.conf"
      ;;
    caddy:tp | caddy:ka)
      # ka: cleartext HTTP/1.1, Caddy's default transport (keep-alive on, idle connections kept 2 minutes).
      local clear=()
      [ "$variant" = ka ] && clear=(CLEARTEXT)
      proxy_peer Caddyfile.in "$dir" "$port" "$origin" "${clear[@]}" >"$dir/Caddyfile"
      local env=(env "HOME=$dir" "XDG_DATA_HOME=$dir/data" "XDG_CONFIG_HOME=$dir/config")
      [ "$variant" = tp ] && env+=(GOMAXPROCS=1)
      start "$dir/server.log" "${env[@]}" "${pin[@]}" caddy run --config "$dir/Caddyfile" --adapter caddyfile
      ;;
    haproxy:tp)
      proxy_peer haproxy.cfg.in "$dir" "$port" "$origin" >"$dir/haproxy.cfg"
      start "$dir/server.log" "${pin[@]}" haproxy -db -f "$dir/haproxy.cfg"
      ;;
    *) die "no $variant configuration for $name" ;;
  esac
  PROXY_PID=$LAST_PID
  if ! wait_port "$port" "$PROXY_PID"; then
    log "$name did not start listening on $port; its log:"
    tail -n 20 "$dir/server.log" "$dir/error.log" 2>/dev/null >&2 || true
    stop_group "$PROXY_PID"
    return 1
  fi
}

# tree_pids PID: PID and all its descendants, comma-separated (for perf stat -p).
tree_pids() {
  { cat /proc/[0-9]*/stat 2>/dev/null || true; } | awk -v root="$1" '
    { pid = $1; rest = $0; sub(/^.*\) /, "", rest); split(rest, f, " "); parent[pid] = f[2] }
    END {
      out = ""
      for (p in parent) {
        q = p
        for (d = 0; d < 64 && q > 0; d++) { if (q == root) { out = out (out == "" ? "" : ",") p; break }; q = parent[q] }
      }
      print out
    }'
}

# tree_ticks PID: "utime stime", in clock ticks, of PID and all its descendants.
tree_ticks() {
  local p
  for p in $(tree_pids "$1" | tr ',' ' '); do cat "/proc/$p/stat" 2>/dev/null || true; done |
    awk '{ rest = $0; sub(/^.*\) /, "", rest); split(rest, f, " "); u += f[12]; s += f[13] } # fields 14 (utime), 15 (stime)
      END { print u + 0, s + 0 }'
}

# stats FILE FORMAT: "median min max" of the numbers in FILE (empty when none).
stats() {
  [ -s "$1" ] || return 0
  sort -g "$1" | awk -v fmt="$2" '{ v[NR] = $1 } END {
    m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
    printf fmt " " fmt " " fmt "\n", m, v[1], v[NR] }'
}
describe() { # describe "median min max" → "median | min–max"
  if [ -n "$1" ]; then
    local med lo hi
    read -r med lo hi <<<"$1"
    printf '%s | %s–%s' "$med" "$lo" "$hi"
  else
    printf 'n/a | n/a'
  fi
}
ratio() { # ratio A B → A/B with 2 decimals, or n/a
  if [ -n "$1" ] && [ -n "$2" ]; then awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f", a / b; else printf "n/a" }'; else printf 'n/a'; fi
}
sum_file() { [ -s "$1" ] && awk '{ s += $1 } END { print s }' "$1" || echo 0; }

# === (1) throughput ===========================================================================
throughput() {
  local -a TP=()
  local s
  for s in "${ACTIVE[@]}"; do TP+=("$s"); done
  [ "${#TP[@]}" -gt 0 ] || { log "throughput: no proxy to measure"; return 0; }

  # nginx and h2o drop root privileges to nobody: everything they read must be world-readable.
  chmod 755 "$TMP"
  ROOT=$TMP/www
  mkdir -p "$ROOT" "$TMP/tp-results" "$TMP/origin"
  printf 'Hello, world!\n' >"$ROOT/small.txt" # 14 bytes
  head -c "$LARGE_BYTES" /dev/urandom >"$ROOT/100k.bin"
  chmod 644 "$ROOT"/*
  CERT=$TMP/cert.pem KEY=$TMP/key.pem COMBINED=$TMP/combined.pem
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 \
    -subj /CN=localhost -addext "subjectAltName=DNS:localhost,IP:127.0.0.1" \
    -keyout "$KEY" -out "$CERT" 2>"$TMP/openssl.log" || { cat "$TMP/openssl.log" >&2; die "openssl failed"; }
  cat "$CERT" "$KEY" >"$COMBINED"
  chmod 644 "$KEY" "$CERT" "$COMBINED"

  # The origin: nginx, cleartext HTTP/1.1, pinned to core 1 with h2load.
  local oport origin opid
  oport=$(free_port)
  origin=127.0.0.1:$oport
  fill "$TPL/origin-nginx.conf.in" "$TMP/origin" 0 "$origin" >"$TMP/origin/nginx.conf"
  start "$TMP/origin/server.log" "${PIN_CLIENT[@]}" nginx -p "$TMP/origin/" -e "$TMP/origin/error.log" -c "$TMP/origin/nginx.conf"
  opid=$LAST_PID
  wait_port "$oport" "$opid" || { cat "$TMP/origin/server.log" "$TMP/origin/error.log" >&2 2>/dev/null || true; die "origin nginx did not start"; }
  cmp -s "$ROOT/100k.bin" <(curl -sS --noproxy '*' --max-time 10 "http://$origin/100k.bin") || die "origin nginx does not serve 100k.bin"
  origin_accepts() { curl -sS --noproxy '*' --max-time 5 "http://$origin/__origin_status" | awk 'NR == 3 { print $1 }'; }

  # h2load_run OUT N URL: prints "req/s not-2xx failed errored timeout", or fails.
  h2load_run() {
    local out=$1 n=$2 url=$3 rc=0
    "${PIN_CLIENT[@]}" timeout "$H2LOAD_TIMEOUT" h2load -n "$n" -c 10 -m 10 "$url" >"$out" 2>&1 || rc=$?
    if [ "$rc" -ne 0 ]; then
      log "h2load -n $n -c 10 -m 10 $url exited $rc$([ "$rc" -eq 124 ] && echo " (timeout ${H2LOAD_TIMEOUT}s)")"
      tail -n 5 "$out" >&2
      return 1
    fi
    grep -q '^Application protocol: h2' "$out" || { log "h2load did not negotiate h2 with $url"; tail -n 5 "$out" >&2; return 1; }
    awk -v n="$n" '
      /^finished in / { rps = $4; sub(/,$/, "", rps) }
      /^requests: / { failed = $10; errored = $12; timeout = $14 }
      /^status codes: / { ok = $3 }
      END { if (rps == "" || ok == "" || ok == 0) exit 1; printf "%s %d %d %d %d\n", rps, n - ok, failed, errored, timeout }
    ' "$out" || { log "h2load through $url: no successful response"; grep -E '^(requests|status codes):' "$out" >&2 || tail -n 5 "$out" >&2; return 1; }
  }

  # verify NAME BASE: 200 over h2 and the exact bytes of both files.
  verify() {
    local name=$1 base=$2 f got
    for f in small.txt 100k.bin; do
      got=$(curl -sS -k --http2 --noproxy '*' --max-time 10 -o "$TMP/tp-$name/got-$f" -w '%{http_code} %{http_version}' "$base/$f" 2>&1) || true
      if [ "$got" != "200 2" ] || ! cmp -s "$ROOT/$f" "$TMP/tp-$name/got-$f"; then
        log "$name: GET /$f answered '$got' with $(wc -c <"$TMP/tp-$name/got-$f" 2>/dev/null || echo 0) bytes (expected 200 over HTTP/2, $(wc -c <"$ROOT/$f") bytes, the same bytes)"
        return 1
      fi
    done
  }

  # measure NAME RUN KIND N URL: one h2load run with the proxy's CPU time and the origin's
  # accepted connections around it; appends to tp-results/NAME.KIND.*; prints a summary.
  measure() {
    local name=$1 run=$2 kind=$3 n=$4 url=$5 u0 s0 u1 s1 a0 a1 res rps bad failed errored tmo cpu sys conns
    read -r u0 s0 <<<"$(tree_ticks "$PROXY_PID")"
    a0=$(origin_accepts)
    res=$(h2load_run "$TMP/tp-$name/$kind-$run.txt" "$n" "$url") || return 1
    read -r u1 s1 <<<"$(tree_ticks "$PROXY_PID")"
    a1=$(origin_accepts)
    read -r rps bad failed errored tmo <<<"$res"
    cpu=$(awk -v a="$((u0 + s0))" -v b="$((u1 + s1))" -v hz="$CLK_TCK" -v n="$n" 'BEGIN { printf "%.3f", (b - a) / hz * 100000 / n }')
    sys=$(awk -v a="$((u0 + s0))" -v b="$((u1 + s1))" -v s="$((s1 - s0))" 'BEGIN { if (b > a) printf "%.0f", 100 * s / (b - a); else printf "0" }')
    conns=$((a1 - a0 - 1)) # the second status request is one of them
    local r=$TMP/tp-results/$name.$kind
    echo "$rps" >>"$r.rps"
    echo "$cpu" >>"$r.cpu"
    echo "$sys" >>"$r.sys"
    echo "$bad" >>"$r.bad"
    echo "$conns" >>"$r.conns"
    printf '%s: %s req/s, %s CPU s/100k (%s %% system), %s not 2xx (failed %s, errored %s, timeout %s), %s upstream conns' \
      "$kind" "$rps" "$cpu" "$sys" "$bad" "$failed" "$errored" "$tmo" "$conns"
  }

  # count_syscalls NAME URL: system calls per request over SYSCALL_N small requests, counted by
  # perf on the proxy's process tree in a run of their own (untimed: the tracepoint adds to
  # every call's cost, more to a proxy that makes more); appended to tp-results/NAME.calls.
  count_syscalls() {
    local name=$1 url=$2 out=$TMP/tp-$name/syscalls.perf perf_pid calls
    [ "$PERF_SYSCALLS" -eq 1 ] || return 0
    perf stat -x, -e raw_syscalls:sys_enter -p "$(tree_pids "$PROXY_PID")" -o "$out" 2>/dev/null &
    perf_pid=$!
    sleep 0.3 # attached before the load starts
    if ! h2load_run "$TMP/tp-$name/syscalls.txt" "$SYSCALL_N" "$url" >/dev/null; then
      kill -INT "$perf_pid" 2>/dev/null || true
      wait "$perf_pid" 2>/dev/null || true
      return 1
    fi
    kill -INT "$perf_pid" 2>/dev/null || true
    wait "$perf_pid" 2>/dev/null || true
    calls=$(awk -F, -v n="$SYSCALL_N" '$3 ~ /raw_syscalls:sys_enter/ && $1 ~ /^[0-9]+$/ { printf "%.2f", $1 / n }' "$out")
    [ -z "$calls" ] || echo "$calls" >>"$TMP/tp-results/$name.calls"
  }

  declare -A DEAD=()
  bench_one() {
    local name=$1 run=$2 port base small large
    port=$(free_port)
    base=https://127.0.0.1:$port
    start_proxy "$name" tp "$port" "$origin" || return 1
    if ! verify "$name" "$base"; then
      DEAD[$name]=1
      log "$name FAILED verification: left out from now on (log: $TMP/tp-$name/server.log)"
      tail -n 5 "$TMP/tp-$name/server.log" >&2 || true
      stop_group "$PROXY_PID"
      return 1
    fi
    # Warm-up: TLS, upstream connections, page cache, allocator.
    h2load_run "$TMP/tp-$name/warmup.txt" 2000 "$base/small.txt" >/dev/null || { stop_group "$PROXY_PID"; return 1; }
    count_syscalls "$name" "$base/small.txt" || { stop_group "$PROXY_PID"; return 1; }
    small=$(measure "$name" "$run" small "$SMALL_N" "$base/small.txt") || { stop_group "$PROXY_PID"; return 1; }
    large=$(measure "$name" "$run" large "$LARGE_N" "$base/100k.bin") || { stop_group "$PROXY_PID"; return 1; }
    kill -0 "$PROXY_PID" 2>/dev/null || { log "$name exited during the run (log: $TMP/tp-$name/server.log)"; return 1; }
    stop_group "$PROXY_PID"
    grep -qi 'panicked' "$TMP/tp-$name/server.log" && log "$name: its log has a panic: $(grep -i -m 1 'panicked' "$TMP/tp-$name/server.log")"
    # Sluice's own log lines at WARN or ERROR (the proxy logs one line per failed request).
    [ "$name" != sluice ] || grep -cE '^[^ ]+ +(WARN|ERROR) ' "$TMP/tp-$name/server.log" >>"$TMP/tp-results/sluice.warns" || true
    log "run $run $name: $small"
    log "run $run $name: $large"
  }

  local n=${#TP[@]} run k name failures=0 t0
  log "throughput: proxies ${TP[*]}; runs: $RUNS; pinning: ${PIN_SERVER[*]:-none} (proxy) / ${PIN_CLIENT[*]:-none} (origin nginx and h2load)"
  log "expected duration: about $((RUNS * n * (3 + SMALL_N / 50000 + LARGE_N / 8000)))-$((RUNS * n * (5 + SMALL_N / 5000 + LARGE_N / 2000))) s ($RUNS runs x $n proxies; each h2load is capped at ${H2LOAD_TIMEOUT}s)"
  t0=$(date +%s)
  for ((run = 1; run <= RUNS; run++)); do
    for ((k = 0; k < n; k++)); do
      name=${TP[$(((run - 1 + k) % n))]}
      [ -z "${DEAD[$name]+x}" ] || continue
      bench_one "$name" "$run" || { failures=$((failures + 1)); log "run $run $name FAILED (left out of the figures)"; }
    done
  done
  log "throughput finished in $(($(date +%s) - t0)) s"
  stop_group "$opid"

  # --- report ---
  local R=$TMP/tp-results
  declare -A MS=() ML=() MCS=() MCL=()
  echo
  echo "### Reverse proxy throughput: h2load, TLS h2 to the proxy, HTTP/1.1 keep-alive to an nginx origin ($RUNS runs, $(date -u +%Y-%m-%d))"
  echo
  echo "Proxy on core 0 (one worker/thread); origin nginx and h2load share core 1. small: $SMALL_N requests for a 14-byte file; large: $LARGE_N requests for a 100,000-byte file; both -c 10 -m 10."
  echo "CPU: the proxy's user+system seconds (whole process tree) per 100,000 requests; system %: the kernel's share of them (median); system calls per small request: counted by perf's raw_syscalls:sys_enter tracepoint over the whole process tree in an untimed run of $SYSCALL_N small requests after the warm-up (median). not 2xx: h2load's failed, errored and non-2xx responses, all runs. conns: upstream connections the proxy opened during one h2load run (median)."
  echo
  echo "| proxy | runs | small req/s median | small req/s min–max | small CPU s/100k median | small CPU min–max | small system % | small system calls/request | large req/s median | large req/s min–max | large CPU s/100k median | large CPU min–max | not 2xx (small/large) | conns (small/large) |"
  echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
  local sr sc lr lc runs
  for name in "${TP[@]}"; do
    sr=$(stats "$R/$name.small.rps" '%.0f')
    sc=$(stats "$R/$name.small.cpu" '%.2f')
    lr=$(stats "$R/$name.large.rps" '%.0f')
    lc=$(stats "$R/$name.large.cpu" '%.2f')
    MS[$name]=${sr%% *} ML[$name]=${lr%% *} MCS[$name]=${sc%% *} MCL[$name]=${lc%% *}
    runs=$( [ -s "$R/$name.large.rps" ] && wc -l <"$R/$name.large.rps" || echo 0)
    echo "| $name | $runs | $(describe "$sr") | $(describe "$sc") | $(stats "$R/$name.small.sys" '%.0f' | awk '{ print $1 }') | $(stats "$R/$name.calls" '%.2f' | awk '{ print ($1 == "" ? "n/a" : $1) }') | $(describe "$lr") | $(describe "$lc") | $(sum_file "$R/$name.small.bad")/$(sum_file "$R/$name.large.bad") | $(stats "$R/$name.small.conns" '%.0f' | awk '{ print $1 }')/$(stats "$R/$name.large.conns" '%.0f' | awk '{ print $1 }') |"
  done
  echo
  if [ -n "${MS[sluice]:-}" ]; then
    local peer
    for peer in h2o haproxy nginx caddy; do
      [ -n "${MS[$peer]:-}" ] || continue
      echo "- Sluice/$peer: req/s small $(ratio "${MS[sluice]}" "${MS[$peer]}")x, large $(ratio "${ML[sluice]}" "${ML[$peer]}")x; CPU per request small $(ratio "${MCS[sluice]}" "${MCS[$peer]}")x, large $(ratio "${MCL[sluice]}" "${MCL[$peer]}")x (ratios of medians)"
    done
  else
    echo "- Sluice not measured: no ratios."
  fi
  if [ "$(sum_file "$R/sluice.warns")" -gt 0 ]; then
    echo "- sluice logged $(sum_file "$R/sluice.warns") WARN/ERROR lines over the runs (rerun with --keep for its log)."
  fi
  echo "- Versions: $(for name in "${TP[@]}"; do printf '%s; ' "$(version "$name")"; done)origin $(version nginx); $(h2load --version 2>&1 | head -n 1). CPU busy before the start: ${BUSY_START}%."
  if grep -q 'buffered to a temporary file' "$TMP/tp-nginx/error.log" 2>/dev/null; then
    echo "- nginx buffered upstream responses to temporary files $(grep -c 'buffered to a temporary file' "$TMP/tp-nginx/error.log") times (proxy_buffers as shipped)."
  fi
  for name in "${!DEAD[@]}"; do echo "- $name failed its curl check and was left out (rerun with --keep for its log)."; done
  if [ "$failures" -gt 0 ] || [ "${#DEAD[@]}" -gt 0 ]; then
    [ "$failures" -eq 0 ] || echo "- $failures run(s) failed and are left out (rerun with --keep for logs)."
    STATUS=1
  fi
}

# === (2) keepalive ============================================================================
keepalive() {
  local -a KA=()
  local s
  for s in "${ACTIVE[@]}"; do
    case "$s" in sluice | caddy) KA+=("$s") ;; esac
  done
  [ "${#KA[@]}" -gt 0 ] || { log "keepalive: neither sluice nor caddy to measure"; return 0; }
  mkdir -p "$TMP/ka"

  cat >"$TMP/ka/origin.js" <<'EOF'
'use strict';
// Keep-alive origin for scripts/bench-proxy.sh: Node's http server with its default
// keepAliveTimeout, 200 "ok" to every request once its body is read, after WORK_MS of
// synchronous work. On SIGTERM it prints the connections and requests it saw.
const http = require('http');
const port = Number(process.argv[2]);
const workMs = Number(process.argv[3] || 0);
let connections = 0;
let requests = 0;
const server = http.createServer((req, res) => {
  requests++;
  req.on('data', () => {});
  req.on('end', () => {
    const until = process.hrtime.bigint() + BigInt(Math.round(workMs * 1e6));
    while (process.hrtime.bigint() < until) { /* the handler's work */ }
    res.writeHead(200, { 'Content-Type': 'text/plain', 'Content-Length': '2' });
    res.end('ok');
  });
});
server.on('connection', () => { connections++; });
server.listen(port, '127.0.0.1', () => {
  console.log(`listening on 127.0.0.1:${port}, keepAliveTimeout ${server.keepAliveTimeout} ms, work ${workMs} ms`);
});
process.on('SIGTERM', () => {
  console.log(`connections ${connections} requests ${requests}`);
  process.exit(0);
});
EOF

  cat >"$TMP/ka/idle_close.py" <<'EOF'
# idle_close.py PORT: one GET on a fresh connection, then the seconds until the server closes
# the idle connection; prints "ANNOUNCED CLOSED" (ANNOUNCED: Keep-Alive timeout, or -).
import re, socket, sys, time
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=5)
s.sendall(b"GET /idle HTTP/1.1\r\nHost: origin\r\n\r\n")
buf = b""
while b"\r\n\r\nok" not in buf:
    chunk = s.recv(4096)
    if not chunk:
        sys.exit("closed before the response")
    buf += chunk
t0 = time.monotonic()
m = re.search(rb"(?i)keep-alive: *timeout=(\d+)", buf)
s.settimeout(20)
try:
    rest = s.recv(4096)
except socket.timeout:
    sys.exit("still open after 20 s")
except ConnectionResetError:
    rest = b""
print(m.group(1).decode() if m else "-", "%.3f" % (time.monotonic() - t0))
EOF

  cat >"$TMP/ka/client.py" <<'EOF'
# client.py PORT N LANES CLOSE OUT: N requests to 127.0.0.1:PORT (even: POST with a 20-byte
# body, odd: GET), a new connection each, in bursts of LANES: lane i sends at +i ms; between
# bursts a pause of CLOSE - 0.10 + (b mod 21) * 0.01 s. Writes "METHOD OUTCOME COUNT" lines.
import collections, http.client, sys, threading, time
port, n, lanes, close, out = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]), sys.argv[5]
BODY = b'{"keepalive":"race"}'
lock = threading.Lock()
count = collections.Counter()

def one(k, at):
    d = at - time.monotonic()
    if d > 0:
        time.sleep(d)
    method = "POST" if k % 2 == 0 else "GET"
    try:
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=15)
        if method == "POST":
            c.request("POST", "/ka/%d" % k, body=BODY, headers={"Content-Type": "application/json"})
        else:
            c.request("GET", "/ka/%d" % k)
        r = c.getresponse()
        data = r.read()
        c.close()
        outcome = "ok" if r.status == 200 and data == b"ok" else ("%d" % r.status if r.status != 200 else "200-wrong-body")
    except Exception as e:  # connection errors count as errors
        outcome = type(e).__name__
    with lock:
        count[(method, outcome)] += 1

k = b = 0
while k < n:
    if b:
        time.sleep(close - 0.10 + ((b - 1) % 21) * 0.01)
    batch = range(k, min(n, k + lanes))
    start = time.monotonic() + 0.01
    ts = [threading.Thread(target=one, args=(j, start + (j - k) / 1000.0)) for j in batch]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    k += len(batch)
    b += 1
with open(out, "w") as f:
    for (m, o), c in sorted(count.items()):
        f.write("%s %s %d\n" % (m, o, c))
EOF

  # When does the origin really close an idle connection? (On an origin of its own.)
  local name bursts close announced cal cport cpid
  cport=$(free_port)
  start "$TMP/ka/origin-calibration.log" node "$TMP/ka/origin.js" "$cport" 0
  cpid=$LAST_PID
  wait_port "$cport" "$cpid" || { cat "$TMP/ka/origin-calibration.log" >&2; die "node origin did not start"; }
  log "keepalive: measuring when the Node origin closes an idle connection (5-7 s)"
  cal=$(timeout 30 python3 "$TMP/ka/idle_close.py" "$cport" 2>&1) || die "could not measure the origin's idle close: $cal"
  stop_group "$cpid"
  read -r announced close <<<"$cal"
  log "keepalive: the origin announces Keep-Alive: timeout=$announced and closes an idle connection after $close s"

  # One Node origin per proxy.
  declare -A OPORT=() OPID=() PPORT=() PPID_=()
  for name in "${KA[@]}"; do
    OPORT[$name]=$(free_port)
    start "$TMP/ka/origin-$name.log" node "$TMP/ka/origin.js" "${OPORT[$name]}" "$KA_WORK_MS"
    OPID[$name]=$LAST_PID
    wait_port "${OPORT[$name]}" "${OPID[$name]}" || { cat "$TMP/ka/origin-$name.log" >&2; die "node origin did not start"; }
  done

  local failed=()
  for name in "${KA[@]}"; do
    PPORT[$name]=$(free_port)
    if ! start_proxy "$name" ka "${PPORT[$name]}" "127.0.0.1:${OPORT[$name]}"; then failed+=("$name"); continue; fi
    PPID_[$name]=$PROXY_PID
    local g p
    g=$(curl -sS --noproxy '*' --max-time 10 "http://127.0.0.1:${PPORT[$name]}/check" 2>&1) || true
    p=$(curl -sS --noproxy '*' --max-time 10 -d check "http://127.0.0.1:${PPORT[$name]}/check" 2>&1) || true
    if [ "$g" != ok ] || [ "$p" != ok ]; then
      log "$name: GET answered '$g', POST answered '$p' (expected ok): left out"
      stop_group "$PROXY_PID"
      unset "PPID_[$name]"
      failed+=("$name")
    fi
  done

  bursts=$(((KA_N + KA_LANES - 1) / KA_LANES))
  local limit
  limit=$(awk -v b="$bursts" -v c="$close" 'BEGIN { printf "%d", b * (c + 20) + 60 }')
  log "keepalive: ${!PPID_[*]}: $KA_N requests each in $bursts bursts of $KA_LANES, pauses $(awk -v c="$close" 'BEGIN { printf "%.2f-%.2f", c - 0.1, c + 0.1 }') s; about $(awk -v b="$bursts" -v c="$close" 'BEGIN { printf "%d", b * (c + 0.2) }') s"
  declare -A CPID=()
  for name in "${!PPID_[@]}"; do
    start "$TMP/ka/client-$name.log" timeout "$limit" python3 "$TMP/ka/client.py" "${PPORT[$name]}" "$KA_N" "$KA_LANES" "$close" "$TMP/ka/result-$name.txt"
    CPID[$name]=$LAST_PID
  done
  local rc
  for name in "${!CPID[@]}"; do
    rc=0
    wait "${CPID[$name]}" || rc=$?
    stop_group "${CPID[$name]}"
    [ "$rc" -eq 0 ] || { STATUS=1; log "$name: the client exited $rc$([ "$rc" -eq 124 ] && echo " (timeout ${limit}s)")"; tail -n 5 "$TMP/ka/client-$name.log" >&2; }
  done
  for name in "${!PPID_[@]}"; do
    kill -0 "${PPID_[$name]}" 2>/dev/null || log "$name exited during the run (log: $TMP/ka-$name/server.log)"
    stop_group "${PPID_[$name]}"
  done
  for name in "${KA[@]}"; do stop_group "${OPID[$name]}"; done

  # --- report ---
  echo
  echo "### Keep-alive race (caddyserver/caddy#6452): HTTP/1.1 keep-alive upstream to Node ($(date -u +%Y-%m-%d))"
  echo
  echo "Origin: Node $(node --version) http, default keepAliveTimeout (announces timeout=$announced, closes an idle connection after $close s), ${KA_WORK_MS} ms of work per request. Downstream: cleartext HTTP/1.1, a new connection per request, from a Python client. $KA_N requests per proxy (half POST with a body, half GET) in bursts of $KA_LANES, pauses of $(awk -v c="$close" 'BEGIN { printf "%.2f-%.2f", c - 0.1, c + 0.1 }') s between bursts. Errors: anything but 200 \"ok\", connection errors included."
  echo
  echo "| proxy | requests | errors (GET) | errors (POST) | origin connections | origin requests |"
  echo "|---|---|---|---|---|---|"
  local res total eg ep oc orq
  for name in "${KA[@]}"; do
    res=$TMP/ka/result-$name.txt
    if [ ! -s "$res" ]; then
      echo "| $name | n/a | n/a | n/a | n/a | n/a |"
      continue
    fi
    total=$(awk '{ s += $3 } END { print s + 0 }' "$res")
    eg=$(awk '$1 == "GET" && $2 != "ok" { s += $3 } END { print s + 0 }' "$res")
    ep=$(awk '$1 == "POST" && $2 != "ok" { s += $3 } END { print s + 0 }' "$res")
    read -r oc orq < <(awk '/^connections / { print $2, $4 }' "$TMP/ka/origin-$name.log" | tail -n 1; echo "n/a n/a") || true
    echo "| $name | $total | $eg | $ep | $oc | $orq |"
  done
  echo
  for name in "${KA[@]}"; do
    res=$TMP/ka/result-$name.txt
    [ -s "$res" ] || continue
    local kinds
    kinds=$(awk '$2 != "ok" { printf "%s%s %s x%d", sep, $1, $2, $3; sep = ", " }' "$res")
    [ -z "$kinds" ] || echo "- $name errors: $kinds"
  done
  if [ -f "$TMP/ka-caddy/server.log" ] && grep -q '"status":502' "$TMP/ka-caddy/server.log"; then
    echo "- caddy logged, e.g.: $(grep '"status":502' "$TMP/ka-caddy/server.log" | head -n 1 | sed -E 's/.*"msg":"([^"]*)".*/\1/')"
  fi
  if [ -f "$TMP/ka-sluice/server.log" ] && grep -qE ' (WARN|ERROR) ' "$TMP/ka-sluice/server.log"; then
    echo "- sluice logged $(grep -cE ' (WARN|ERROR) ' "$TMP/ka-sluice/server.log") warnings/errors, e.g.: $(grep -E ' (WARN|ERROR) ' "$TMP/ka-sluice/server.log" | head -n 1)"
  fi
  echo "- Origin counts include the start-up probe (one connection) and the two curl checks (GET and POST)."
  echo "- Versions: $(for name in "${KA[@]}"; do printf '%s; ' "$(version "$name")"; done)node $(node --version). CPU busy before the start: ${BUSY_START}%."
  for name in "${failed[@]}"; do
    echo "- $name failed to start or its curl check and was left out (rerun with --keep for its log)."
    STATUS=1
  done
}

# Each part sets STATUS=1 when something failed; the exit status says so.
STATUS=0
if [ "$DO_TP" -eq 1 ]; then throughput; fi
if [ "$DO_KA" -eq 1 ]; then keepalive; fi
exit "$STATUS"
