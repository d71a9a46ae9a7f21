#!/usr/bin/env python3
"""h3prio.py: how much less urgent data an urgent HTTP/3 response waits behind (aioquic 1.x).

Usage:
  python3 scripts/h3prio.py [--insecure] [--timeout S] [--after BYTES] [--connect-to ADDR]
      --urgent URL BULK_URL...

Opens ONE QUIC connection and requests every BULK_URL on it with `priority: u=5, i`. Once
BYTES (default 500000) of bulk response body have arrived, it requests URL with
`priority: u=0` on the same connection. It counts bulk body bytes, not time: a server whose
queue towards the client holds N bytes when the urgent request arrives delivers about N bulk
bytes before the urgent response's first byte. Prints one JSON object:
  {"bulk_before": bulk bytes received when the urgent request was sent,
   "ahead": bulk bytes received after that and before the urgent response's first body byte,
   "urgent_status", "urgent_len", "urgent_seconds": request to end of the urgent response,
   "bulk_len": bulk bytes received in all}
and stops (the bulk responses are not awaited). Exit status 1 on a connection failure or
timeout, with a one-line error on stderr; 2 on bad usage.
"""
import argparse
import asyncio
import contextlib
import json
import logging
import os
import sys
import time
from urllib.parse import urlsplit

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from h3client import H3Client, client_config  # noqa: E402  (shared request and event plumbing)

from aioquic.asyncio import connect  # noqa: E402
from aioquic.h3.events import DataReceived  # noqa: E402


class PrioClient(H3Client):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.bulk = 0
        self.after = None
        self.urgent_url = None
        self.urgent = None  # the urgent Response once requested
        self.bulk_before = None
        self.ahead = None
        self.urgent_sid = None

    def on_data(self, sid, n):
        if self.urgent is not None and sid == self.urgent_sid:
            if self.ahead is None:
                self.ahead = self.bulk - self.bulk_before
            return
        self.bulk += n
        if self.urgent is None and self.bulk >= self.after:
            self.bulk_before = self.bulk
            self.urgent_sid = self._quic.get_next_available_stream_id()
            self.urgent = self.request("GET", self.urgent_url, [(b"priority", b"u=0")], None, None)


def patch_counting(client):
    """Count every body byte in arrival order, as the H3 layer hands the events out."""
    orig = client.h3.handle_event

    def handle(event):
        evs = orig(event)
        for ev in evs:
            if isinstance(ev, DataReceived) and ev.data:
                client.on_data(ev.stream_id, len(ev.data))
        return evs

    client.h3.handle_event = handle


async def run(args):
    asyncio.get_running_loop().set_exception_handler(lambda loop, ctx: None)
    first = urlsplit(args.bulk[0])
    config = client_config(first.hostname, args.timeout, args.insecure)
    async with contextlib.AsyncExitStack() as stack:
        client = await asyncio.wait_for(stack.enter_async_context(connect(
            args.connect_to or first.hostname, first.port or 443, configuration=config,
            create_protocol=PrioClient)), args.timeout)
        client.after, client.urgent_url = args.after, args.urgent
        patch_counting(client)
        bulk = [client.request("GET", u, [(b"priority", b"u=5, i")], None, None) for u in args.bulk]
        deadline = time.monotonic() + args.timeout
        while client.urgent is None:
            if time.monotonic() > deadline or all(r.done.done() for r in bulk):
                raise ConnectionError("the urgent request was never sent (bulk ended or timed out)")
            await asyncio.sleep(0.005)
        await asyncio.wait_for(client.urgent.done, max(0.0, deadline - time.monotonic()))
        client.urgent.done.result()
        return {"bulk_before": client.bulk_before, "ahead": client.ahead,
                "urgent_status": client.urgent.status, "urgent_len": client.urgent.length,
                "urgent_seconds": client.urgent.seconds, "bulk_len": client.bulk}


def main():
    p = argparse.ArgumentParser(description="urgent-behind-bulk count over HTTP/3 (see the top of this file)")
    p.add_argument("--insecure", action="store_true")
    p.add_argument("--timeout", type=float, default=30.0)
    p.add_argument("--after", type=int, default=500_000)
    p.add_argument("--connect-to", metavar="ADDR")
    p.add_argument("--urgent", required=True)
    p.add_argument("bulk", nargs="+", metavar="BULK_URL")
    args = p.parse_args()
    logging.getLogger("quic").setLevel(logging.CRITICAL + 1)
    try:
        out = asyncio.run(asyncio.wait_for(run(args), args.timeout + 5))
    except (ConnectionError, OSError, asyncio.TimeoutError) as e:
        print(f"h3prio: {e or type(e).__name__}", file=sys.stderr)
        sys.exit(1)
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
