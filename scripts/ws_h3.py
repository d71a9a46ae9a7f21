#!/usr/bin/env python3
"""ws_h3.py: a WebSocket over HTTP/3 (RFC 9220) with aioquic, for Sluice's tests.

Usage: python3 scripts/ws_h3.py PORT PATH [COUNT]

Connects to 127.0.0.1:PORT (certificate not verified: the tests' self-signed one), waits for
the server's SETTINGS, sends an extended CONNECT (`:protocol: websocket`), then COUNT masked
text frames one at a time, each after the previous echo. Prints one JSON object: whether the
server sent SETTINGS_ENABLE_CONNECT_PROTOCOL, the status, the echoed messages and each round
trip in ms.
"""
import asyncio
import json
import ssl
import sys
import time

from aioquic.asyncio import connect
from aioquic.asyncio.protocol import QuicConnectionProtocol
from aioquic.h3.connection import H3_ALPN, H3Connection
from aioquic.h3.events import DataReceived, HeadersReceived
from aioquic.quic.configuration import QuicConfiguration

ENABLE_CONNECT_PROTOCOL = 0x08


def frame(text):
    payload = text.encode()
    mask = b"\x01\x02\x03\x04"
    return bytes([0x81, 0x80 | len(payload)]) + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload))


class Client(QuicConnectionProtocol):
    def __init__(self, *a, **k):
        super().__init__(*a, **k)
        self.h3 = H3Connection(self._quic)
        self.events = asyncio.Queue()

    def quic_event_received(self, event):
        for e in self.h3.handle_event(event):
            self.events.put_nowait(e)


async def main(port, path, count):
    out = {"settings": None, "status": None, "echoed": [], "rtt_ms": []}
    cfg = QuicConfiguration(is_client=True, alpn_protocols=H3_ALPN, verify_mode=ssl.CERT_NONE)
    async with connect("127.0.0.1", port, configuration=cfg, create_protocol=Client) as c:
        deadline = time.monotonic() + 5
        while c.h3.received_settings is None and time.monotonic() < deadline:
            c.transmit()
            await asyncio.sleep(0.01)
        settings = c.h3.received_settings or {}
        out["settings"] = settings.get(ENABLE_CONNECT_PROTOCOL) == 1
        sid = c._quic.get_next_available_stream_id()
        c.h3.send_headers(sid, [
            (b":method", b"CONNECT"), (b":protocol", b"websocket"), (b":scheme", b"https"),
            (b":authority", f"127.0.0.1:{port}".encode()), (b":path", path.encode()),
            (b"sec-websocket-version", b"13"),
        ], end_stream=False)
        c.transmit()
        buf, n, sent = b"", 0, 0.0
        while n < count:
            e = await asyncio.wait_for(c.events.get(), 10)
            if isinstance(e, HeadersReceived) and e.stream_id == sid:
                out["status"] = int(dict(e.headers)[b":status"])
                if out["status"] != 200:
                    break
                sent = time.monotonic()
                c.h3.send_data(sid, frame(f"m{n}"), end_stream=False)
                c.transmit()
            elif isinstance(e, DataReceived) and e.stream_id == sid:
                buf += e.data
                while len(buf) >= 2 and len(buf) >= 2 + (buf[1] & 0x7F):
                    length = buf[1] & 0x7F
                    out["echoed"].append(buf[2:2 + length].decode())
                    out["rtt_ms"].append((time.monotonic() - sent) * 1e3)
                    buf = buf[2 + length:]
                    n += 1
                    if n < count:
                        sent = time.monotonic()
                        c.h3.send_data(sid, frame(f"m{n}"), end_stream=False)
                        c.transmit()
    print(json.dumps(out))


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]), sys.argv[2], int(sys.argv[3]) if len(sys.argv) > 3 else 3))
