#!/usr/bin/env python3
"""Open N idle HTTP/2-over-TLS connections and hold them (for scripts/bench-idle.sh).

Each connection completes TLS with ALPN h2, sends the connection preface and an empty
SETTINGS frame, sends one GET and reads until its response has ended (so every connection
has carried a request, as a browser's does), then stays open and silent. Prints "ready N"
when all are open (or "ready K" with K < N and the first errors, after --open-secs), then
holds them until stdin closes or --hold-secs passes.

Usage: idle_conns.py HOST PORT N [--path /hello.txt] [--open-secs 120] [--hold-secs 600]
"""
import argparse
import asyncio
import ssl
import struct
import sys

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"


def frame(ftype, flags, stream, payload=b""):
    return struct.pack(">I", len(payload))[1:] + bytes([ftype, flags]) + struct.pack(">I", stream) + payload


def literal(name, value):
    # HPACK literal without indexing, new name (RFC 7541 §6.2.2), no Huffman.
    def s(b):
        assert len(b) < 127
        return bytes([len(b)]) + b
    return b"\x00" + s(name) + s(value)


async def open_h2(a, ctx):
    r, w = await asyncio.open_connection(a.host, a.port, ssl=ctx, server_hostname="localhost")
    if w.get_extra_info("ssl_object").selected_alpn_protocol() != "h2":
        raise RuntimeError("ALPN did not select h2")
    block = (
        literal(b":method", b"GET")
        + literal(b":scheme", b"https")
        + literal(b":authority", b"localhost")
        + literal(b":path", a.path.encode())
    )
    w.write(PREFACE + frame(0x4, 0, 0) + frame(0x1, 0x5, 1, block))
    await w.drain()
    # Read frames until stream 1 ends (END_STREAM on HEADERS or DATA); ack SETTINGS.
    while True:
        hdr = await r.readexactly(9)
        length = int.from_bytes(hdr[:3], "big")
        ftype, flags, sid = hdr[3], hdr[4], int.from_bytes(hdr[5:9], "big") & 0x7FFFFFFF
        await r.readexactly(length)
        if ftype == 0x4 and not flags & 0x1:
            w.write(frame(0x4, 0x1, 0))
        if ftype == 0x7:
            raise RuntimeError("GOAWAY")
        if sid == 1 and ftype in (0x0, 0x1) and flags & 0x1:
            break
    return w


async def hold(open_one, idle, concurrency, open_secs, add_args=None):
    """The clients' shared driver: parse HOST PORT N and the options, open N connections with
    `await open_one(args)` (at most `concurrency` opening at once), then `await idle(conn,
    stop)` on each until `stop` is set. Prints "ready K" once all are open or --open-secs has
    passed (the first errors on standard error), and sets `stop` when stdin closes or
    --hold-secs passes."""
    ap = argparse.ArgumentParser()
    ap.add_argument("host")
    ap.add_argument("port", type=int)
    ap.add_argument("n", type=int)
    ap.add_argument("--path", default="/hello.txt")
    ap.add_argument("--open-secs", type=float, default=open_secs)
    ap.add_argument("--hold-secs", type=float, default=600)
    if add_args:
        add_args(ap)
    a = ap.parse_args()
    opened, errors, stop = [], [], asyncio.Event()
    sem = asyncio.Semaphore(concurrency)

    async def client():
        async with sem:
            try:
                conn = await open_one(a)
            except Exception as e:  # noqa: BLE001 - reported, counted
                errors.append(repr(e))
                return
        opened.append(conn)
        try:
            await idle(conn, stop)
        except Exception:  # noqa: BLE001 - the measurement is over or the server closed it
            pass

    tasks = [asyncio.create_task(client()) for _ in range(a.n)]
    loop = asyncio.get_running_loop()
    deadline = loop.time() + a.open_secs
    while len(opened) + len(errors) < a.n and loop.time() < deadline:
        await asyncio.sleep(0.1)
    print(f"ready {len(opened)}", flush=True)
    if errors:
        print(f"errors {len(errors)}: {errors[:3]}", file=sys.stderr, flush=True)
    stdin_closed = loop.run_in_executor(None, sys.stdin.read)
    await asyncio.wait([stdin_closed], timeout=a.hold_secs)
    stop.set()
    await asyncio.wait(tasks, timeout=5)
    for t in tasks:
        t.cancel()


async def main():
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    ctx.set_alpn_protocols(["h2"])

    async def idle(w, stop):
        await stop.wait()
        w.close()

    await hold(lambda a: open_h2(a, ctx), idle, concurrency=200, open_secs=120)


if __name__ == "__main__":
    asyncio.run(main())
