#!/usr/bin/env python3
"""Open N idle HTTP/3 connections and hold them (for scripts/bench-idle.sh --quic).

Each connection completes the QUIC handshake with ALPN h3 (aioquic, certificate not checked),
sends one GET and reads until its response has ended (so every connection has carried a
request, as a browser's does), then stays open: a PING every --ping-secs keeps it from the
server's idle timeout and nothing else is sent. Prints "ready N" when all are open (or
"ready K" with K < N and the first errors, after --open-secs), then holds them until stdin
closes or --hold-secs passes. Each connection has its own UDP socket, as separate clients
would.

Usage: idle_quic.py HOST PORT N [--path /hello.txt] [--open-secs 300] [--hold-secs 600]
"""
import argparse
import asyncio
import ssl
import sys

from aioquic.asyncio import connect
from aioquic.asyncio.protocol import QuicConnectionProtocol
from aioquic.h3.connection import H3_ALPN, H3Connection
from aioquic.h3.events import DataReceived, HeadersReceived
from aioquic.quic.configuration import QuicConfiguration
from aioquic.quic.events import ConnectionTerminated


class Client(QuicConnectionProtocol):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.h3 = H3Connection(self._quic)
        self.done = asyncio.get_running_loop().create_future()
        self.closed = asyncio.get_running_loop().create_future()

    def quic_event_received(self, event):
        if isinstance(event, ConnectionTerminated):
            for f in (self.done, self.closed):
                if not f.done():
                    f.set_exception(ConnectionError(f"closed: 0x{event.error_code:x} {event.reason_phrase}"))
            return
        for ev in self.h3.handle_event(event):
            if isinstance(ev, (HeadersReceived, DataReceived)) and ev.stream_ended and not self.done.done():
                self.done.set_result(None)


async def one(host, port, path, cfg, ping_secs, opened, errors, stop):
    try:
        async with connect(host, port, configuration=cfg, create_protocol=Client) as c:
            sid = c._quic.get_next_available_stream_id()
            c.h3.send_headers(sid, [(b":method", b"GET"), (b":scheme", b"https"),
                                    (b":authority", b"localhost"), (b":path", path.encode())],
                              end_stream=True)
            c.transmit()
            await asyncio.wait_for(c.done, 30)
            opened.append(c)
            while not stop.is_set():
                try:
                    await asyncio.wait_for(stop.wait(), ping_secs)
                except asyncio.TimeoutError:
                    await c.ping()
    except Exception as e:  # noqa: BLE001 - reported, counted
        errors.append(repr(e))


async def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("host")
    ap.add_argument("port", type=int)
    ap.add_argument("n", type=int)
    ap.add_argument("--path", default="/hello.txt")
    ap.add_argument("--open-secs", type=float, default=300)
    ap.add_argument("--hold-secs", type=float, default=600)
    ap.add_argument("--ping-secs", type=float, default=10)
    a = ap.parse_args()
    cfg = QuicConfiguration(is_client=True, alpn_protocols=H3_ALPN, server_name="localhost",
                            idle_timeout=120)
    cfg.verify_mode = ssl.CERT_NONE
    opened, errors, stop = [], [], asyncio.Event()
    sem = asyncio.Semaphore(100)

    async def bounded():
        async with sem:
            start = len(opened)
            task = asyncio.ensure_future(one(a.host, a.port, a.path, cfg, a.ping_secs, opened, errors, stop))
            # Hold the slot until this connection is open (or failed), not while it idles.
            while len(opened) == start and not task.done():
                await asyncio.sleep(0.005)
            return task

    starters = [asyncio.ensure_future(bounded()) for _ in range(a.n)]
    loop = asyncio.get_running_loop()
    deadline = loop.time() + a.open_secs
    while len(opened) + len(errors) < a.n and loop.time() < deadline:
        await asyncio.sleep(0.1)
    print(f"ready {len(opened)}", flush=True)
    for e in errors[:3]:
        print(f"error {e}", file=sys.stderr, flush=True)
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    try:
        await asyncio.wait_for(reader.read(), a.hold_secs)
    except asyncio.TimeoutError:
        pass
    stop.set()
    tasks = [t.result() for t in starters if t.done() and not t.cancelled() and t.exception() is None]
    for s in starters:
        s.cancel()
    await asyncio.wait([t for t in tasks if not t.done()] or [asyncio.sleep(0)], timeout=5)


if __name__ == "__main__":
    asyncio.run(main())
