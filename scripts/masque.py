#!/usr/bin/env python3
"""masque.py: CONNECT and CONNECT-UDP (RFC 9298) over HTTP/3 with aioquic, for Sluice's tests
and its tunnel benchmark.

Usage:
  masque.py tcp PROXY_PORT HOST PORT [--auth USER:PASS]
      CONNECT HOST:PORT; sends an HTTP/1.1 GET / through the tunnel, prints what came back.
  masque.py udp PROXY_PORT HOST PORT COUNT [--capsules] [--size N] [--auth USER:PASS]
      CONNECT-UDP to a UDP echo: COUNT payloads one at a time, each after the previous echo
      (QUIC DATAGRAM frames, or DATAGRAM capsules on the stream with --capsules).
  masque.py flood PROXY_PORT HOST PORT COUNT [--size N]
      COUNT payloads as fast as they go, then echoes one at a time: does the tunnel still work?
  masque.py bench PROXY_PORT HOST PORT SECONDS [--size N] [--window W]
      Echo throughput with at most W payloads in flight, for SECONDS (--capsules: on the
      stream instead of in QUIC datagrams).
  masque.py quic PROXY_PORT INNER_PORT PATH
      CONNECT-UDP to 127.0.0.1:INNER_PORT, then a whole HTTP/3 connection (aioquic's own)
      through the tunnel: GET PATH from the server there.
  masque.py abandon PROXY_PORT HOST PORT COUNT
      Opens COUNT CONNECT-UDP tunnels and leaves without closing them (the QUIC connection
      just goes silent).

The proxy is 127.0.0.1:PROXY_PORT, or --proxy ADDR (certificate not verified: the tests' self-signed one).
Prints one JSON object.
"""
import argparse
import asyncio
import base64
import json
import os
import ssl
import statistics
import time

from aioquic.asyncio import connect
from aioquic.asyncio.protocol import QuicConnectionProtocol
from aioquic.buffer import Buffer, encode_uint_var
from aioquic.h3.connection import H3_ALPN, H3Connection
from aioquic.h3.events import DataReceived, DatagramReceived, HeadersReceived
from aioquic.quic.configuration import QuicConfiguration
from aioquic.quic.connection import QuicConnection
from aioquic.quic.events import StreamDataReceived

H3_DATAGRAM = 0x33


class Client(QuicConnectionProtocol):
    def __init__(self, *a, **k):
        super().__init__(*a, **k)
        # aioquic announces SETTINGS_H3_DATAGRAM only with WebTransport on (its extra setting
        # is one the server ignores).
        self.h3 = H3Connection(self._quic, enable_webtransport=True)
        self.events = asyncio.Queue()

    def quic_event_received(self, event):
        for e in self.h3.handle_event(event):
            self.events.put_nowait(e)


def capsule(payload):
    # A DATAGRAM capsule (type 0) with Context ID 0 (RFC 9297 §3.5, RFC 9298 §4).
    return encode_uint_var(0) + encode_uint_var(len(payload) + 1) + b"\x00" + payload


def parse_capsules(buf):
    """Whole capsules out of buf: ([(type, value)], rest)."""
    out = []
    while True:
        try:
            b = Buffer(data=buf)
            ty = b.pull_uint_var()
            ln = b.pull_uint_var()
            start = b.tell()
        except Exception:
            return out, buf
        if len(buf) < start + ln:
            return out, buf
        out.append((ty, buf[start:start + ln]))
        buf = buf[start + ln:]


class Tunnel:
    """One CONNECT or CONNECT-UDP request on an aioquic HTTP/3 connection."""

    def __init__(self, c, sid):
        self.c, self.sid = c, sid
        self.status, self.headers = None, {}
        self.data = b""
        self.datagrams = asyncio.Queue()
        self.ended = False

    async def pump(self, timeout):
        e = await asyncio.wait_for(self.c.events.get(), timeout)
        if isinstance(e, HeadersReceived) and e.stream_id == self.sid:
            self.headers = {k.decode(): v.decode() for k, v in e.headers}
            self.status = int(self.headers[":status"])
            self.ended |= e.stream_ended
        elif isinstance(e, DataReceived) and e.stream_id == self.sid:
            self.data += e.data
            self.ended |= e.stream_ended
            if self.headers.get("capsule-protocol") == "?1":
                caps, self.data = parse_capsules(self.data)
                for ty, v in caps:
                    if ty == 0 and v[:1] == b"\x00":
                        self.datagrams.put_nowait(v[1:])
        elif isinstance(e, DatagramReceived) and e.stream_id == self.sid:
            if e.data[:1] == b"\x00":
                self.datagrams.put_nowait(e.data[1:])

    async def response(self, timeout=10):
        deadline = time.monotonic() + timeout
        while self.status is None:
            await self.pump(max(0.01, deadline - time.monotonic()))

    def send_udp(self, payload, capsules=False):
        if capsules:
            self.c.h3.send_data(self.sid, capsule(payload), end_stream=False)
        else:
            self.c.h3.send_datagram(self.sid, b"\x00" + payload)
        self.c.transmit()

    async def recv_udp(self, timeout):
        deadline = time.monotonic() + timeout
        while self.datagrams.empty():
            left = deadline - time.monotonic()
            if left <= 0:
                raise asyncio.TimeoutError
            await self.pump(left)
        return self.datagrams.get_nowait()


async def settings(c):
    deadline = time.monotonic() + 5
    while c.h3.received_settings is None and time.monotonic() < deadline:
        c.transmit()
        await asyncio.sleep(0.01)
    return c.h3.received_settings or {}


def auth_field(auth):
    if not auth:
        return []
    return [(b"proxy-authorization", b"Basic " + base64.b64encode(auth.encode()))]


def open_udp(c, port, host, uport, auth=None):
    sid = c._quic.get_next_available_stream_id()
    target = host.replace(":", "%3A")
    c.h3.send_headers(sid, [
        (b":method", b"CONNECT"), (b":protocol", b"connect-udp"), (b":scheme", b"https"),
        (b":authority", f"127.0.0.1:{port}".encode()),
        (b":path", f"/.well-known/masque/udp/{target}/{uport}/".encode()),
        (b"capsule-protocol", b"?1"),
    ] + auth_field(auth), end_stream=False)
    c.transmit()
    return Tunnel(c, sid)


async def udp_tunnel(c, a, out):
    """A CONNECT-UDP tunnel to a.host:a.tport once the server's SETTINGS are in; its status
    goes into out."""
    await settings(c)
    t = open_udp(c, a.port, a.host, a.tport)
    await t.response()
    out["status"] = t.status
    return t


def config():
    # Packets up to 1,452 bytes (quinn's largest by default) carry a whole 1,200-byte QUIC
    # packet of a tunnelled connection in one DATAGRAM frame.
    return QuicConfiguration(is_client=True, alpn_protocols=H3_ALPN, verify_mode=ssl.CERT_NONE,
                             max_datagram_frame_size=65536, max_datagram_size=1452)


async def run_tcp(a):
    out = {}
    async with connect(a.proxy, a.port, configuration=config(), create_protocol=Client) as c:
        await settings(c)
        sid = c._quic.get_next_available_stream_id()
        c.h3.send_headers(sid, [(b":method", b"CONNECT"), (b":authority", f"{a.host}:{a.tport}".encode())]
                          + auth_field(a.auth), end_stream=False)
        c.transmit()
        t = Tunnel(c, sid)
        await t.response()
        out["status"] = t.status
        out["headers"] = t.headers
        if t.status == 200:
            c.h3.send_data(sid, b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", end_stream=True)
            c.transmit()
        try:
            while not t.ended:
                await t.pump(5)
        except asyncio.TimeoutError:
            out["timeout"] = True
        out["data"] = t.data.decode(errors="replace")
    return out


async def run_udp(a):
    out = {"echoed": 0, "lost": 0, "rtt_ms": []}
    async with connect(a.proxy, a.port, configuration=config(), create_protocol=Client) as c:
        out["h3_datagram"] = (await settings(c)).get(H3_DATAGRAM) == 1
        t = open_udp(c, a.port, a.host, a.tport, a.auth)
        await t.response()
        out["status"], out["headers"] = t.status, t.headers
        if t.status != 200:
            return out
        for i in range(a.count):
            payload = (b"%08d" % i) + b"x" * max(0, a.size - 8)
            sent = time.monotonic()
            t.send_udp(payload, a.capsules)
            try:
                got = await t.recv_udp(2)
                if got == payload:
                    out["echoed"] += 1
                    out["rtt_ms"].append((time.monotonic() - sent) * 1e3)
            except asyncio.TimeoutError:
                out["lost"] += 1
    return out


async def run_flood(a):
    out = {}
    async with connect(a.proxy, a.port, configuration=config(), create_protocol=Client) as c:
        t = await udp_tunnel(c, a, out)
        start = time.monotonic()
        for i in range(a.count):
            c.h3.send_datagram(t.sid, b"\x00" + b"f" * a.size)
            if i % 64 == 0:
                c.transmit()
                await asyncio.sleep(0)
        c.transmit()
        out["sent"] = a.count
        out["send_secs"] = time.monotonic() - start
        # Whatever came back of the flood, then the tunnel must still echo.
        back = 0
        try:
            while True:
                await t.recv_udp(0.5)
                back += 1
        except asyncio.TimeoutError:
            pass
        out["flood_echoed"] = back
        ok = 0
        for i in range(5):
            t.send_udp(b"after%d" % i)
            try:
                got = await t.recv_udp(2)
                ok += got == b"after%d" % i
            except asyncio.TimeoutError:
                pass
        out["after_echoed"] = ok
    return out


async def run_bench(a):
    out = {}
    async with connect(a.proxy, a.port, configuration=config(), create_protocol=Client) as c:
        t = await udp_tunnel(c, a, out)
        payload = b"b" * a.size
        in_flight, sent, back = 0, 0, 0
        send = (lambda: c.h3.send_data(t.sid, capsule(payload), end_stream=False)) if a.capsules else \
            (lambda: c.h3.send_datagram(t.sid, b"\x00" + payload))
        start = time.monotonic()
        end = start + a.seconds
        while time.monotonic() < end:
            while in_flight < a.window:
                send()
                in_flight += 1
                sent += 1
            c.transmit()
            try:
                await t.recv_udp(0.2)
                back += 1
                in_flight -= 1
                while not t.datagrams.empty():
                    t.datagrams.get_nowait()
                    back += 1
                    in_flight -= 1
            except asyncio.TimeoutError:
                in_flight = 0  # lost ones: start a new window
        secs = time.monotonic() - start
        out.update(sent=sent, echoed=back, secs=secs, mbit_per_s=back * a.size * 8 / secs / 1e6,
                   packets_per_s=back / secs)
    return out


async def run_abandon(a):
    out = {"opened": 0}
    async with connect(a.proxy, a.port, configuration=config(), create_protocol=Client) as c:
        await settings(c)
        ts = [open_udp(c, a.port, a.host, a.tport) for _ in range(a.count)]
        for t in ts:
            await t.response()
            out["opened"] += t.status == 200
        out["statuses"] = sorted({t.status for t in ts})
        # Leave without a word: no CONNECTION_CLOSE, no stream closed; the server finds out
        # only by its idle timeout.
        print(json.dumps(out), flush=True)
        os._exit(0)


async def run_quic(a):
    """An inner QUIC connection (aioquic's, sans-IO) whose packets ride the tunnel."""
    out = {}
    async with connect(a.proxy, a.port, configuration=config(), create_protocol=Client) as c:
        await settings(c)
        t = open_udp(c, a.port, "127.0.0.1", a.tport)
        await t.response()
        out["status"] = t.status
        if t.status != 200:
            return out
        inner_cfg = QuicConfiguration(is_client=True, alpn_protocols=H3_ALPN, verify_mode=ssl.CERT_NONE,
                                      max_datagram_size=1200)
        q = QuicConnection(configuration=inner_cfg)
        q.connect(("127.0.0.1", a.tport), now=time.monotonic())
        h3 = H3Connection(q)
        sid = None
        status, body, done = None, b"", False
        deadline = time.monotonic() + 15
        while not done and time.monotonic() < deadline:
            for data, _addr in q.datagrams_to_send(now=time.monotonic()):
                t.send_udp(data)
            try:
                wait = q.get_timer()
                wait = 0.05 if wait is None else max(0.001, min(0.05, wait - time.monotonic()))
                pkt = await t.recv_udp(wait)
                q.receive_datagram(pkt, ("127.0.0.1", a.tport), now=time.monotonic())
            except asyncio.TimeoutError:
                timer = q.get_timer()
                if timer is not None and timer <= time.monotonic():
                    q.handle_timer(now=time.monotonic())
            ev = q.next_event()
            while ev is not None:
                if type(ev).__name__ == "HandshakeCompleted" and sid is None:
                    sid = q.get_next_available_stream_id()
                    h3.send_headers(sid, [(b":method", b"GET"), (b":scheme", b"https"),
                                          (b":authority", f"127.0.0.1:{a.tport}".encode()),
                                          (b":path", a.path.encode())], end_stream=True)
                for h in h3.handle_event(ev):
                    if isinstance(h, HeadersReceived) and h.stream_id == sid:
                        status = int(dict(h.headers)[b":status"])
                        done |= h.stream_ended
                    elif isinstance(h, DataReceived) and h.stream_id == sid:
                        body += h.data
                        done |= h.stream_ended
                ev = q.next_event()
        out.update(inner_status=status, inner_body_bytes=len(body), inner_done=done)
        q.close()
        for data, _addr in q.datagrams_to_send(now=time.monotonic()):
            t.send_udp(data)
    return out


def main():
    p = argparse.ArgumentParser()
    p.add_argument("mode", choices=["tcp", "udp", "flood", "bench", "quic", "abandon"])
    p.add_argument("port", type=int)
    p.add_argument("rest", nargs="+")
    p.add_argument("--auth")
    p.add_argument("--proxy", default="127.0.0.1", help="the proxy's address (default 127.0.0.1)")
    p.add_argument("--capsules", action="store_true")
    p.add_argument("--size", type=int, default=32)
    p.add_argument("--window", type=int, default=32)
    a = p.parse_args()
    if a.mode == "quic":
        a.tport, a.path = int(a.rest[0]), a.rest[1]
    else:
        a.host, a.tport = a.rest[0], int(a.rest[1])
        if a.mode in ("udp", "flood", "abandon"):
            a.count = int(a.rest[2])
        if a.mode == "bench":
            a.seconds = float(a.rest[2])
    run = {"tcp": run_tcp, "udp": run_udp, "flood": run_flood, "bench": run_bench, "quic": run_quic,
           "abandon": run_abandon}[a.mode]
    out = asyncio.run(run(a))
    if out.get("rtt_ms"):
        rtts = out.pop("rtt_ms")
        out["rtt_median_ms"] = statistics.median(rtts)
        out["rtt_p90_ms"] = sorted(rtts)[int(len(rtts) * 0.9)]
    print(json.dumps(out))


if __name__ == "__main__":
    main()
