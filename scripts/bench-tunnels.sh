#!/usr/bin/env bash
# Benchmark (not a test): Sluice's tunnels. Prints figures; asserts nothing.
#
# (1) WebSocket echo through the reverse proxy, one connection, loopback: a PyPI `websockets`
#   echo upstream (HTTP/1.1) behind a proxied route /ws/; clients send $WS_N (2000) messages one
#   at a time, each after the previous echo, over HTTP/1.1 (`websockets` sync client, wss://),
#   HTTP/2 (Node's http2, scripts/ws_h2.js, RFC 8441) and HTTP/3 (aioquic, scripts/ws_h3.py,
#   RFC 9220). Per protocol: messages per second (1 / mean round trip) and the median and 90th
#   percentile round trip. The clients differ (Python, Node, Python on aioquic): compare each
#   protocol's figure across runs and builds, not the protocols with one another too closely.
#
# (2) UDP through CONNECT-UDP (RFC 9298), loopback: a UDP echo; the client (aioquic,
#   scripts/masque.py bench) keeps $UDP_WINDOW (32) payloads of $UDP_SIZE (1200) bytes in
#   flight for $UDP_SECS (5) s, in QUIC DATAGRAM frames and then in capsules on the stream;
#   beside it the same client loop on a plain UDP socket straight to the echo. Reported: echoed
#   payloads per second, Mbit/s of payload, and Sluice's CPU time per payload carried (both
#   ways: utime + stime from /proc/PID/stat over the run, divided by twice the echoed count).
#   The Python clients are the bottleneck here, not Sluice: the CPU per payload is the figure
#   that says what the tunnel costs.
#
# (3) The same UDP run over an emulated link ($LINK_RATE 100 Mbit/s, $LINK_DELAY 10 ms each way:
#   20 ms RTT; sluice-lab link, root only): Sluice and the echo in the server namespace, the
#   client in the client namespace, window $LAB_WINDOW (256: more than the BDP of 208 payloads).
#   Reported: payloads/s and Mbit/s, and the bytes on the link per payload (the forwarder's
#   counters: IP and UDP headers, QUIC's short header, frame and AEAD tag, the quarter stream
#   id and Context ID), beside the 28 bytes (IPv4 + UDP) a payload sent directly costs.
#
# Usage: scripts/bench-tunnels.sh [--runs N] [--no-lab]
# Env: SLUICE_BIN (default target/release/sluice; build it with cargo build --release -p sluice),
#   SLUICE_LAB (default target/release/sluice-lab), WS_N, UDP_SIZE, UDP_WINDOW, UDP_SECS,
#   LAB_WINDOW, LINK_RATE, LINK_DELAY.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
RUNS=3
LAB=1
while [ $# -gt 0 ]; do
  case "$1" in
    --runs) RUNS=$2; shift 2 ;;
    --no-lab) LAB=0; shift ;;
    *) echo "usage: $0 [--runs N] [--no-lab]" >&2; exit 2 ;;
  esac
done
SLUICE_BIN=${SLUICE_BIN:-$ROOT/target/release/sluice}
SLUICE_LAB=${SLUICE_LAB:-$ROOT/target/release/sluice-lab}
WS_N=${WS_N:-2000}
UDP_SIZE=${UDP_SIZE:-1200}
UDP_WINDOW=${UDP_WINDOW:-32}
UDP_SECS=${UDP_SECS:-5}
LAB_WINDOW=${LAB_WINDOW:-256}
LINK_RATE=${LINK_RATE:-100}
LINK_DELAY=${LINK_DELAY:-10}
[ -x "$SLUICE_BIN" ] || { echo "no $SLUICE_BIN: cargo build --release -p sluice" >&2; exit 1; }
for t in python3 node curl; do command -v $t >/dev/null || { echo "needs $t (scripts/setup.sh)" >&2; exit 1; }; done

TMP=$(mktemp -d /tmp/bench-tunnels.XXXXXX)
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$TMP"
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_port() { for _ in $(seq 100); do curl -sk -o /dev/null "https://127.0.0.1:$1/" && return 0; sleep 0.1; done; echo "port $1 not up" >&2; exit 1; }
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
TICK=$(getconf CLK_TCK)

UDP_ECHO='import socket,sys
s=socket.socket(socket.AF_INET,socket.SOCK_DGRAM); s.bind((sys.argv[1],int(sys.argv[2])))
while True:
    d,a=s.recvfrom(65536); s.sendto(d,a)'
# The plain-UDP baseline: the same windowed loop as masque.py bench, on a socket.
UDP_DIRECT='import socket,sys,time,json
host,port,secs,size,window=sys.argv[1],int(sys.argv[2]),float(sys.argv[3]),int(sys.argv[4]),int(sys.argv[5])
s=socket.socket(socket.AF_INET,socket.SOCK_DGRAM); s.connect((host,port)); s.settimeout(0.2)
p=b"b"*size; sent=back=inflight=0; t0=time.monotonic()
while time.monotonic()<t0+secs:
    while inflight<window: s.send(p); inflight+=1; sent+=1
    try:
        s.recv(65536); back+=1; inflight-=1
    except socket.timeout: inflight=0
d=time.monotonic()-t0
print(json.dumps({"echoed":back,"secs":d,"packets_per_s":back/d,"mbit_per_s":back*size*8/d/1e6}))'
WS_H1='import ssl,sys,time,json,statistics
from websockets.sync.client import connect
ctx=ssl.create_default_context(); ctx.check_hostname=False; ctx.verify_mode=ssl.CERT_NONE
rtt=[]
with connect(sys.argv[1], ssl=ctx) as ws:
    for i in range(int(sys.argv[2])):
        t=time.monotonic(); ws.send("m%d"%i); assert ws.recv()=="m%d"%i; rtt.append((time.monotonic()-t)*1e3)
print(json.dumps({"rtt_ms":rtt}))'

med() { python3 -c 'import sys,statistics
v=sorted(float(x) for x in sys.argv[1:])
f=lambda x: "{:,.0f}".format(x) if abs(x) >= 100 else "{:.3g}".format(x)
print("%s (%s–%s)" % (f(statistics.median(v)), f(v[0]), f(v[-1])))' "$@"; }

# --- servers -----------------------------------------------------------------------------
WS_PORT=$(free_port)
python3 -c "import websockets.sync.server as s
def echo(ws):
    for m in ws: ws.send(m)
with s.serve(echo, '127.0.0.1', $WS_PORT) as srv: srv.serve_forever()" 2>/dev/null &
PIDS+=($!)
ECHO_PORT=$(free_port)
python3 -c "$UDP_ECHO" 127.0.0.1 "$ECHO_PORT" &
PIDS+=($!)
TLS_PORT=$(free_port)
mkdir -p "$TMP/www" "$TMP/data"
echo ok > "$TMP/www/index.html"
cat > "$TMP/sluice.toml" <<EOF
data_dir = '$TMP/data'
access_log = false
[[listener]]
addr = "127.0.0.1:$TLS_PORT"
[[site]]
root = '$TMP/www'
[[site.route]]
path = "/ws/"
proxy = "ws"
[[upstream]]
name = "ws"
servers = ["127.0.0.1:$WS_PORT"]
[admin]
addr = "127.0.0.1:0"
[connect]
allow = ["127.0.0.1:$ECHO_PORT"]
EOF
"$SLUICE_BIN" serve --config "$TMP/sluice.toml" > "$TMP/sluice.log" 2>&1 &
SLUICE_PID=$!
PIDS+=($SLUICE_PID)
wait_port "$TLS_PORT"
echo "# Tunnels, $(date -u +%F), $(git rev-parse --short HEAD 2>/dev/null || echo '?'), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) cores"
echo

# --- (1) WebSocket echo --------------------------------------------------------------------
summarise_ws() { python3 -c 'import json,sys,statistics
r=json.loads(sys.stdin.read()); v=sorted(r["rtt_ms"])
print("%.1f %.3f %.3f" % (1e3/statistics.mean(v), statistics.median(v), v[int(len(v)*0.9)]))'; }
declare -A RATE MEDIAN P90
for proto in h1 h2 h3; do RATE[$proto]=""; MEDIAN[$proto]=""; P90[$proto]=""; done
for run in $(seq "$RUNS"); do
  for proto in h1 h2 h3; do
    case $proto in
      h1) out=$(python3 -c "$WS_H1" "wss://127.0.0.1:$TLS_PORT/ws/" "$WS_N") ;;
      h2) out=$(node scripts/ws_h2.js "$TLS_PORT" /ws/ "$WS_N") ;;
      h3) out=$(python3 scripts/ws_h3.py "$TLS_PORT" /ws/ "$WS_N") ;;
    esac
    read -r rate m p <<<"$(echo "$out" | summarise_ws)"
    RATE[$proto]+=" $rate"; MEDIAN[$proto]+=" $m"; P90[$proto]+=" $p"
  done
done
echo "## WebSocket echo through the proxy ($WS_N messages one at a time, one connection; median of $RUNS runs, min–max)"
echo
echo "| protocol (client) | messages/s | median round trip ms | p90 ms |"
echo "|---|---:|---:|---:|"
for proto in h1 h2 h3; do
  client=$([ $proto = h1 ] && echo "HTTP/1.1 (websockets)" || ([ $proto = h2 ] && echo "HTTP/2 (Node)" || echo "HTTP/3 (aioquic)"))
  # shellcheck disable=SC2086
  echo "| $client | $(med ${RATE[$proto]}) | $(med ${MEDIAN[$proto]}) | $(med ${P90[$proto]}) |"
done
echo

# --- (2) UDP on loopback -------------------------------------------------------------------
udp_row() { # name, then the command printing bench JSON
  local name=$1; shift
  local pps="" mbit="" cpu=""
  for run in $(seq "$RUNS"); do
    local before after out
    before=$(cpu_ticks "$SLUICE_PID")
    out=$("$@")
    after=$(cpu_ticks "$SLUICE_PID")
    pps+=" $(echo "$out" | python3 -c 'import json,sys; print("%.0f" % json.load(sys.stdin)["packets_per_s"])')"
    mbit+=" $(echo "$out" | python3 -c 'import json,sys; print("%.1f" % json.load(sys.stdin)["mbit_per_s"])')"
    cpu+=" $(echo "$out" | python3 -c "import json,sys; r=json.load(sys.stdin); print('%.2f' % (($after-$before)/$TICK*1e6/max(1,2*r['echoed'])))")"
  done
  # shellcheck disable=SC2086
  echo "| $name | $(med $pps) | $(med $mbit) | $(med $cpu) |"
}
echo "## UDP echo through CONNECT-UDP, loopback ($UDP_SIZE-byte payloads, $UDP_WINDOW in flight, ${UDP_SECS} s; median of $RUNS runs, min–max)"
echo
echo "| path | payloads/s | Mbit/s | Sluice CPU µs per payload |"
echo "|---|---:|---:|---:|"
udp_row "direct (no tunnel)" python3 -c "$UDP_DIRECT" 127.0.0.1 "$ECHO_PORT" "$UDP_SECS" "$UDP_SIZE" "$UDP_WINDOW"
udp_row "HTTP/3, QUIC datagrams" python3 scripts/masque.py bench "$TLS_PORT" 127.0.0.1 "$ECHO_PORT" "$UDP_SECS" --size "$UDP_SIZE" --window "$UDP_WINDOW"
udp_row "HTTP/3, capsules" python3 scripts/masque.py bench "$TLS_PORT" 127.0.0.1 "$ECHO_PORT" "$UDP_SECS" --size "$UDP_SIZE" --window "$UDP_WINDOW" --capsules
echo

# --- (3) UDP over an emulated link ----------------------------------------------------------
if [ "$LAB" = 1 ]; then
  if [ "$(id -u)" != 0 ] || [ ! -x "$SLUICE_LAB" ]; then
    echo "(emulated link skipped: needs root and $SLUICE_LAB; cargo build --release -p sluice-lab)"
    exit 0
  fi
  kill "$SLUICE_PID"
  "$SLUICE_LAB" link --rate "$LINK_RATE" --delay "$LINK_DELAY" > "$TMP/link.log" 2>&1 &
  LINK_PID=$!
  for _ in $(seq 100); do ip netns list | grep -q sluice-lab-s && ip netns exec sluice-lab-c true 2>/dev/null && break; sleep 0.1; done
  sleep 1
  S=10.99.0.2
  ip netns exec sluice-lab-s python3 -c "$UDP_ECHO" $S 7000 &
  PIDS+=($!)
  sed -e "s/127.0.0.1:$TLS_PORT/$S:4433/" -e "s/127.0.0.1:$ECHO_PORT/$S:7000/" "$TMP/sluice.toml" > "$TMP/lab.toml"
  ip netns exec sluice-lab-s "$SLUICE_BIN" serve --config "$TMP/lab.toml" > "$TMP/lab-sluice.log" 2>&1 &
  PIDS+=($!)
  for _ in $(seq 100); do ip netns exec sluice-lab-c curl -sk -o /dev/null "https://$S:4433/" && break; sleep 0.1; done
  link_bytes() { ip netns exec sluice-lab-s cat /proc/net/dev | awk '/slab-s/ {print $2 + $10, $3 + $11}'; }
  echo "## UDP echo through CONNECT-UDP over ${LINK_RATE} Mbit/s × $((2 * LINK_DELAY)) ms RTT ($UDP_SIZE-byte payloads, $LAB_WINDOW in flight, ${UDP_SECS} s; median of $RUNS runs)"
  echo
  echo "| path | payloads/s | Mbit/s | bytes on the link per payload |"
  echo "|---|---:|---:|---:|"
  lab_row() {
    local name=$1; shift
    local pps="" mbit="" per=""
    for run in $(seq "$RUNS"); do
      read -r b0 p0 <<<"$(link_bytes)"
      out=$(ip netns exec sluice-lab-c "$@")
      read -r b1 p1 <<<"$(link_bytes)"
      pps+=" $(echo "$out" | python3 -c 'import json,sys; print("%.0f" % json.load(sys.stdin)["packets_per_s"])')"
      mbit+=" $(echo "$out" | python3 -c 'import json,sys; print("%.1f" % json.load(sys.stdin)["mbit_per_s"])')"
      per+=" $(echo "$out" | python3 -c "import json,sys; r=json.load(sys.stdin); print('%.1f' % (($b1-$b0)/max(1,2*r['echoed']) - $UDP_SIZE))")"
    done
    # shellcheck disable=SC2086
    echo "| $name | $(med $pps) | $(med $mbit) | $UDP_SIZE + $(med $per) |"
  }
  lab_row "direct (no tunnel)" python3 -c "$UDP_DIRECT" $S 7000 "$UDP_SECS" "$UDP_SIZE" "$LAB_WINDOW"
  lab_row "HTTP/3, QUIC datagrams" python3 scripts/masque.py bench 4433 $S 7000 "$UDP_SECS" --size "$UDP_SIZE" --window "$LAB_WINDOW" --proxy $S
  echo
  echo "(bytes per payload: the server-side TUN device's bytes both ways, over twice the payloads echoed: includes retransmissions, ACKs and lost payloads' share)"
  kill -INT "$LINK_PID"
  wait "$LINK_PID" || true
fi
