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
import asyncio
import ssl

from aioquic.asyncio import connect
from aioquic.asyncio.protocol import QuicConnectionProtocol
from aioquic.h3.connection import H3_ALPN, H3Connection
from aioquic.h3.events import DataReceived, HeadersReceived
from aioquic.quic.configuration import QuicConfiguration
from aioquic.quic.events import ConnectionTerminated
from idle_conns import hold


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


async def open_h3(a, cfg):
    # Entered by hand (not `async with`): the connection outlives this call, until `idle` ends.
    cm = connect(a.host, a.port, configuration=cfg, create_protocol=Client)
    c = await cm.__aenter__()
    try:
        sid = c._quic.get_next_available_stream_id()
        c.h3.send_headers(sid, [(b":method", b"GET"), (b":scheme", b"https"),
                                (b":authority", b"localhost"), (b":path", a.path.encode())],
                          end_stream=True)
        c.transmit()
        await asyncio.wait_for(c.done, 30)
    except BaseException:
        await cm.__aexit__(None, None, None)
        raise
    return cm, c, a.ping_secs


async def main():
    cfg = QuicConfiguration(is_client=True, alpn_protocols=H3_ALPN, server_name="localhost",
                            idle_timeout=120)
    cfg.verify_mode = ssl.CERT_NONE

    async def idle(conn, stop):
        cm, c, ping_secs = conn
        try:
            while not stop.is_set():
                try:
                    await asyncio.wait_for(stop.wait(), ping_secs)
                except asyncio.TimeoutError:
                    await c.ping()
        finally:
            await cm.__aexit__(None, None, None)

    await hold(lambda a: open_h3(a, cfg), idle, concurrency=100, open_secs=300,
               add_args=lambda ap: ap.add_argument("--ping-secs", type=float, default=10))


if __name__ == "__main__":
    asyncio.run(main())
