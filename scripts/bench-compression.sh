#!/usr/bin/env bash
# Benchmark (not a test): compression of a 1 MB JavaScript file, ratio and server CPU per MB,
# by codec and level, Sluice beside nginx's gzip and h2o's brotli (Debian packages).
#
# The file: Debian's jquery.js (libjs-jquery, the 290 KB script the operations issue names)
# followed by npm's own JavaScript sources in name order, cut at 1,000,000 bytes.
#
#   Sluice, on the fly: a proxied route (the origin, a second Sluice without compression, is
#     not measured), one server start per codec and level ([compression] brotli_level, ...).
#   Sluice, stored: the file as a static file; its variant is made once at the stored level
#     (brotli 9, zstd 15, gzip 9: the defaults) and served from memory, as a precompressed
#     sibling would be.
#   nginx: gzip on the fly at levels 1 (its default) and 6; h2o: `compress: ON` (brotli and
#     gzip at h2o's own qualities).
#
# For each: h2load fetches the file N times over TLS h2 (-c 1 -m 1) with one Accept-Encoding;
# the server is pinned to core 0, h2load to core 1. Reported: the compressed size and the ratio
# (1 MB over it), and MB of input per server CPU second (user + system of the process, from
# /proc/PID/stat around the run), the median of --runs runs with min–max.
#
# Usage: scripts/bench-compression.sh [--runs N] [--requests N] [--no-build] [--keep]
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BENCH=$REPO/scripts/bench
# shellcheck source=bench/lib.sh
. "$BENCH/lib.sh"
RUNS=3
REQUESTS=100
BUILD=1
KEEP=0
log() { printf 'bench: %s\n' "$*" >&2; }
die() { printf 'bench: ERROR: %s\n' "$*" >&2; exit 1; }
while [ $# -gt 0 ]; do
  case "$1" in
    --runs) RUNS=${2:?}; shift 2 ;;
    --requests) REQUESTS=${2:?}; shift 2 ;;
    --no-build) BUILD=0; shift ;;
    --keep) KEEP=1; shift ;;
    -h | --help) sed -n '2,21p' "$0"; exit 0 ;;
    *) die "unknown argument: $1 (see --help)" ;;
  esac
done
for t in h2load openssl curl nginx h2o python3; do
  command -v "$t" >/dev/null 2>&1 || [ -x "/usr/sbin/$t" ] || die "$t not found (run scripts/setup.sh)"
done
JQUERY=/usr/share/javascript/jquery/jquery.js
[ -f "$JQUERY" ] || die "$JQUERY not found (Debian libjs-jquery; run scripts/setup.sh)"
NPM=$(dirname "$(dirname "$(readlink -f "$(command -v npm)")")")
[ -d "$NPM" ] || die "npm's sources not found"
SLUICE=${SLUICE_BIN:-$REPO/target/release/sluice}
if [ -z "${SLUICE_BIN:-}" ] && [ "$BUILD" -eq 1 ]; then
  (cd "$REPO" && cargo build --release -p sluice) >&2 || die "cargo build failed"
fi
require_shipped_build "$SLUICE"
NGINX=$(command -v nginx || echo /usr/sbin/nginx)
PIN_SERVER=(taskset -c 0) PIN_CLIENT=(taskset -c 1)

TMP=$(mktemp -d "${TMPDIR:-/tmp}/sluice-bench-compression.XXXXXX")
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do stop_pid "$p"; done
  if [ "$KEEP" -eq 1 ]; then log "kept $TMP"; else rm -rf "$TMP"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM
chmod 755 "$TMP"
ROOT=$TMP/www
mkdir -p "$ROOT" "$TMP/data" "$TMP/nginx" "$TMP/h2o"
{
  cat "$JQUERY"
  find "$NPM" -name '*.js' -type f | LC_ALL=C sort | xargs cat
} 2>/dev/null | head -c 1000000 >"$ROOT/app.js" || true # cat ends on SIGPIPE once head has its bytes
[ "$(stat -c %s "$ROOT/app.js")" -eq 1000000 ] || die "could not make a 1,000,000-byte file"
chmod 644 "$ROOT/app.js"
CERT=$TMP/cert.pem KEY=$TMP/key.pem
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 -subj /CN=localhost \
  -addext "subjectAltName=DNS:localhost,IP:127.0.0.1" -keyout "$KEY" -out "$CERT" 2>/dev/null
chmod 644 "$KEY" "$CERT"

wait_port() {
  local i
  for ((i = 0; i < 100; i++)); do
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
    sleep 0.1
  done
  die "nothing listens on $1"
}

# The process's user + system time in ns, its exited threads' included (tokio's blocking
# threads come and go; /proc/PID/task/*/schedstat would lose theirs). Clock ticks: runs last
# seconds, so that 10 ms steps do not matter.
cpu_ns() {
  awk -v hz="$(getconf CLK_TCK)" '{ sub(/^.*\) /, ""); printf "%.0f\n", ($12 + $13) * 1e9 / hz }' /proc/"$1"/stat
}
# nginx's worker is the master's child.
worker_of() { pgrep -P "$1" | head -1 || echo "$1"; }

# measure NAME PID PORT PATH ENCODING: one line "NAME ENCODING size cpu_s,cpu_s,..."
measure() {
  local name=$1 pid=$2 port=$3 path=$4 enc=$5 size runs=() r before after
  size=$(curl -sk --http2 -H "accept-encoding: $enc" -o "$TMP/out" -w '%{size_download}' "https://127.0.0.1:$port$path")
  grep -qi "^content-encoding: $enc" <(curl -sk --http2 -D - -o /dev/null -H "accept-encoding: $enc" "https://127.0.0.1:$port$path") \
    || [ "$enc" = identity ] || die "$name sent $path without content-encoding: $enc"
  for ((r = 0; r < RUNS; r++)); do
    before=$(cpu_ns "$pid")
    "${PIN_CLIENT[@]}" h2load -n "$REQUESTS" -c 1 -m 1 -H "accept-encoding: $enc" "https://127.0.0.1:$port$path" >"$TMP/h2load.out" 2>&1 \
      || { cat "$TMP/h2load.out" >&2; die "h2load failed against $name"; }
    grep -q "$REQUESTS succeeded" "$TMP/h2load.out" || { cat "$TMP/h2load.out" >&2; die "$name: failed requests"; }
    after=$(cpu_ns "$pid")
    runs+=("$(awk -v a="$before" -v b="$after" 'BEGIN { printf "%.4f", (b - a) / 1e9 }')")
  done
  echo "$name $enc $size $(IFS=,; echo "${runs[*]}")" >>"$TMP/results"
}

ORIGIN_PORT=$(free_port)
cat >"$TMP/origin.toml" <<EOF
data_dir = '$TMP/data'
access_log = false
[[listener]]
addr = "127.0.0.1:$ORIGIN_PORT"
tls = false
[[site]]
root = '$ROOT'
[compression]
enabled = false
[admin]
enabled = false
EOF
"$SLUICE" serve --config "$TMP/origin.toml" >"$TMP/origin.log" 2>&1 &
PIDS+=($!)
wait_port "$ORIGIN_PORT"

# sluice_run NAME COMPRESSION_KEYS ENCODING PATH
sluice_run() {
  local port pid
  port=$(free_port)
  cat >"$TMP/sluice.toml" <<EOF
data_dir = '$TMP/data'
access_log = false
[[listener]]
addr = "127.0.0.1:$port"
[[certificate]]
cert = '$CERT'
key = '$KEY'
[[upstream]]
name = "origin"
servers = ["127.0.0.1:$ORIGIN_PORT"]
[[site]]
root = '$ROOT'
[[site.route]]
path = "/fly/"
proxy = "origin"
[admin]
enabled = false
[compression]
$2
EOF
  # The proxied path /fly/app.js reaches the origin as /fly/app.js: give it that file.
  mkdir -p "$ROOT/fly" && ln -sf "$ROOT/app.js" "$ROOT/fly/app.js"
  "${PIN_SERVER[@]}" "$SLUICE" serve --config "$TMP/sluice.toml" >"$TMP/sluice.log" 2>&1 &
  pid=$!
  PIDS+=("$pid")
  wait_port "$port"
  measure "$1" "$pid" "$port" "$4" "$3"
  stop_pid "$pid"
}

log "Sluice, on the fly"
for lv in 1 4 6 9; do sluice_run "sluice-fly-br-$lv" "brotli_level = $lv" br /fly/app.js; done
for lv in 1 3 9; do sluice_run "sluice-fly-zstd-$lv" "zstd_level = $lv" zstd /fly/app.js; done
for lv in 1 6 9; do sluice_run "sluice-fly-gzip-$lv" "gzip_level = $lv" gzip /fly/app.js; done
log "Sluice, stored variants"
for enc in br zstd gzip identity; do sluice_run "sluice-stored" "" "$enc" /app.js; done

log "nginx gzip"
for lv in 1 6; do
  port=$(free_port)
  static_peer nginx.conf.in "$TMP/nginx" "$port" PAGES \
    | sed "s|^http {|http {\n    gzip on; gzip_comp_level $lv; gzip_types text/javascript application/javascript;|" >"$TMP/nginx/nginx.conf"
  "${PIN_SERVER[@]}" "$NGINX" -p "$TMP/nginx/" -e "$TMP/nginx/error.log" -c "$TMP/nginx/nginx.conf" >"$TMP/nginx/out.log" 2>&1 &
  pid=$!
  PIDS+=("$pid")
  wait_port "$port"
  measure "nginx-gzip-$lv" "$(worker_of "$pid")" "$port" /app.js gzip
  stop_pid "$pid"
done

log "h2o compress: ON"
port=$(free_port)
static_peer h2o.conf.in "$TMP/h2o" "$port" | sed 's|^\(        file.dir: .*\)$|\1\n        compress: ON|' >"$TMP/h2o/h2o.conf"
"${PIN_SERVER[@]}" h2o -c "$TMP/h2o/h2o.conf" >"$TMP/h2o/out.log" 2>&1 &
pid=$!
PIDS+=("$pid")
wait_port "$port"
for enc in br gzip; do measure "h2o-compress" "$pid" "$port" /app.js "$enc"; done
stop_pid "$pid"

echo
echo "$(date -u +%F), build $(cd "$REPO" && git rev-parse --short HEAD), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) cores; 1,000,000-byte JavaScript, $REQUESTS requests per run, medians of $RUNS runs"
echo
echo "| server, mode | coding | bytes sent | ratio | MB of input per CPU second (min–max) |"
echo "|---|---|---:|---:|---:|"
awk -v n="$REQUESTS" '
  {
    split($4, c, ",")
    k = 0
    for (i in c) v[++k] = n / c[i]
    # sort ascending
    for (i = 1; i <= k; i++) for (j = i + 1; j <= k; j++) if (v[j] < v[i]) { t = v[i]; v[i] = v[j]; v[j] = t }
    med = (k % 2) ? v[(k + 1) / 2] : (v[k / 2] + v[k / 2 + 1]) / 2
    printf "| %s | %s | %d | %.2f | %.0f (%.0f–%.0f) |\n", $1, $2, $3, 1000000 / $3, med, v[1], v[k]
  }' "$TMP/results"
