#!/usr/bin/env python3
"""h3client.py: a small HTTP/3 test client for Sluice's integration tests (needs aioquic 1.x).

Usage:
  python3 scripts/h3client.py [--insecure] [--cafile F] [--method GET|PUT|POST]
      [--data-file F] [--header 'name: value']... [--header-first 'name: value']...
      [--serial] [--out F] [--json] [--timeout S] [--connect-to ADDR] URL [URL...]

All URLs must be https:// and share one host:port. The client opens ONE QUIC connection
(ALPN "h3") and sends every request concurrently on it, each on its own stream. For each
request it prints one JSON line to stdout, in the order the URLs were given:
  {"url", "status", "headers": [[name, value], ...], "interim": [[status, [[name, value], ...]], ...],
   "trailers": [[name, value], ...], "body_len", "body_sha256", "body", "seconds"}
"headers" are the final (non-1xx) response headers, pseudo-headers included, in wire order;
"interim" the 1xx responses before it, in order; "trailers" the trailer section (empty when
none came); "body" the body as text when it is at most 4 KiB (else null); "seconds" runs from
sending the request to the end of its response.

  --insecure       do not verify the server certificate (self-signed test certs)
  --cafile F       verify the server certificate against the CA(s) in PEM file F
  --method M       request method (default GET); --data-file F sends F's bytes as the body
  --header H       extra request header 'name: value' (repeatable; names are lowercased)
  --header-first H the same, on the first URL's request only
  --serial         send each request only once the one before it has completed (default:
                   all at once)
  --trailer H      request trailer 'name: value' sent after the body (repeatable)
  --out F          also write the response body to F (only with a single URL)
  --json           JSON-lines output; it is the only format and the default (accepted for
                   compatibility)
  --timeout S      total time limit for the whole run, connecting included (default 30)
  --connect-to A   connect to address A instead of the URL's host (SNI and :authority still
                   name the URL's host), like curl's --resolve

Exit status: 0 when every request completed (whatever its HTTP status); 1 on a connection,
TLS, protocol or stream failure or on timeout, with a one-line error on stderr (the lines of
requests that did complete are still printed); 2 on bad usage.
"""
import argparse
import asyncio
import contextlib
import hashlib
import json
import logging
import ssl
import sys
import time
from urllib.parse import urlsplit

from aioquic.asyncio import connect
from aioquic.asyncio.protocol import QuicConnectionProtocol
from aioquic.h3.connection import H3_ALPN, H3Connection
from aioquic.h3.events import DataReceived, HeadersReceived
from aioquic.quic.configuration import QuicConfiguration
from aioquic.quic.events import ConnectionTerminated, StreamReset


class Response:
    def __init__(self, url, out):
        self.url, self.out = url, out
        self.status, self.headers = None, []
        self.interim, self.trailers, self.small = [], [], bytearray()
        self.sha, self.length = hashlib.sha256(), 0
        self.started = time.monotonic()
        self.seconds = None
        self.done = asyncio.get_running_loop().create_future()

    def finish(self, error=None):
        if self.done.done():
            return
        self.seconds = round(time.monotonic() - self.started, 6)
        if error is None and self.status is None:
            error = "stream ended without a final response"
        if error is not None:
            self.done.set_exception(ConnectionError(error))
        else:
            self.done.set_result(None)


LAST_CLOSE = []  # reason of a connection close, for failures before connect() returns


class H3Client(QuicConnectionProtocol):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.h3 = H3Connection(self._quic)
        self.responses = {}  # stream id -> Response

    def request(self, method, url, headers, body, out, trailers=()):
        parts = urlsplit(url)
        path = parts.path or "/"
        if parts.query:
            path += "?" + parts.query
        sid = self._quic.get_next_available_stream_id()
        resp = self.responses[sid] = Response(url, out)
        self.h3.send_headers(sid, [(b":method", method.encode()), (b":scheme", b"https"),
                                   (b":authority", parts.netloc.encode()),
                                   (b":path", path.encode())] + headers,
                             end_stream=body is None and not trailers)
        if body is not None:
            self.h3.send_data(sid, body, end_stream=not trailers)
        if trailers:
            self.h3.send_headers(sid, list(trailers), end_stream=True)
        self.transmit()
        return resp

    def quic_event_received(self, event):
        if isinstance(event, ConnectionTerminated):
            why = f"connection closed: error 0x{event.error_code:x} {event.reason_phrase!r}"
            LAST_CLOSE.append(why)
            for resp in self.responses.values():
                resp.finish(why)
            return
        if isinstance(event, StreamReset) and event.stream_id in self.responses:
            self.responses[event.stream_id].finish(
                f"stream {event.stream_id} reset by server: error 0x{event.error_code:x}")
        for ev in self.h3.handle_event(event):
            resp = self.responses.get(getattr(ev, "stream_id", None))
            if resp is None:
                continue
            if isinstance(ev, HeadersReceived):
                status = dict(ev.headers).get(b":status", b"")
                fields = [[n.decode(errors="replace"), v.decode(errors="replace")]
                          for n, v in ev.headers]
                if resp.status is None and status.startswith(b"1"):
                    resp.interim.append([int(status) if status.isdigit() else None, fields])
                elif resp.status is None:
                    resp.status = int(status) if status.isdigit() else None
                    resp.headers = fields
                else:
                    resp.trailers = fields
            elif isinstance(ev, DataReceived):
                resp.sha.update(ev.data)
                resp.length += len(ev.data)
                if len(resp.small) <= 4096:
                    resp.small += ev.data
                if resp.out is not None:
                    resp.out.write(ev.data)
            if ev.stream_ended:
                resp.finish()


def client_config(hostname, timeout, insecure):
    """The QUIC configuration of the test clients: ALPN h3, 16 MiB windows, SNI `hostname`
    (also when another address is dialled), certificate checks off with `insecure`."""
    config = QuicConfiguration(is_client=True, alpn_protocols=H3_ALPN,
                               idle_timeout=min(timeout, 30.0),
                               max_data=16 << 20, max_stream_data=16 << 20)
    config.server_name = hostname
    if insecure:
        config.verify_mode = ssl.CERT_NONE
    return config


async def run(args, headers, body, trailers=()):
    # aioquic leaves a failed handshake waiter unretrieved after a timeout: not worth a warning.
    asyncio.get_running_loop().set_exception_handler(lambda loop, ctx: None)
    first = urlsplit(args.urls[0])
    config = client_config(first.hostname, args.timeout, args.insecure)
    if args.cafile:
        config.load_verify_locations(cafile=args.cafile)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + args.timeout
    async with contextlib.AsyncExitStack() as stack:
        out = stack.enter_context(open(args.out, "wb")) if args.out else None
        try:
            client = await asyncio.wait_for(stack.enter_async_context(connect(
                args.connect_to or first.hostname, first.port or 443, configuration=config,
                create_protocol=H3Client)), args.timeout)
        except asyncio.TimeoutError:
            return [f"timed out connecting after {args.timeout:g}s"]
        resps = []
        for i, u in enumerate(args.urls):
            extra = args.first_headers if i == 0 else []
            resps.append(client.request(args.method, u, headers + extra, body, out, trailers))
            if args.serial:
                await asyncio.wait([resps[-1].done], timeout=max(0.0, deadline - loop.time()))
        await asyncio.wait([r.done for r in resps], timeout=max(0.0, deadline - loop.time()))
        errors = []
        for resp in resps:  # report before closing the connection settles what is pending
            if not resp.done.done():
                errors.append(f"{resp.url}: timed out after {args.timeout:g}s")
            elif resp.done.exception() is not None:
                errors.append(f"{resp.url}: {resp.done.exception()}")
            else:
                small = bytes(resp.small) if len(resp.small) <= 4096 else None
                print(json.dumps({"url": resp.url, "status": resp.status,
                                  "headers": resp.headers, "interim": resp.interim,
                                  "trailers": resp.trailers, "body_len": resp.length,
                                  "body": small.decode(errors="replace") if small is not None else None,
                                  "body_sha256": resp.sha.hexdigest(),
                                  "seconds": resp.seconds}), flush=True)
    return errors

def main():
    p = argparse.ArgumentParser(description="HTTP/3 test client (see the top of this file)")
    p.add_argument("--insecure", action="store_true")
    p.add_argument("--cafile")
    p.add_argument("--method", default="GET", choices=["GET", "PUT", "POST", "DELETE"])
    p.add_argument("--data-file")
    p.add_argument("--header", action="append", default=[])
    p.add_argument("--header-first", action="append", default=[])
    p.add_argument("--serial", action="store_true")
    p.add_argument("--trailer", action="append", default=[])
    p.add_argument("--out")
    p.add_argument("--json", action="store_true")
    p.add_argument("--timeout", type=float, default=30.0)
    p.add_argument("--connect-to", metavar="ADDR",
                   help="connect to ADDR (the URL's port) instead of resolving the URL's host")
    p.add_argument("urls", nargs="+", metavar="URL")
    args = p.parse_args()
    logging.getLogger("quic").setLevel(logging.CRITICAL + 1)  # errors go out as one line
    parts = [urlsplit(u) for u in args.urls]
    if any(s.scheme != "https" or not s.hostname for s in parts):
        p.error("every URL must be https://host[:port]/...")
    if len({(s.hostname, s.port or 443) for s in parts}) != 1:
        p.error("all URLs must share one host:port")
    if args.out and len(args.urls) != 1:
        p.error("--out needs exactly one URL")
    def fields(items, what):
        out = []
        for h in items:
            name, sep, value = h.partition(":")
            if not sep or not name.strip():
                p.error(f"bad --{what} {h!r}; want 'name: value'")
            out.append((name.strip().lower().encode(), value.strip().encode()))
        return out
    headers = fields(args.header, "header")
    args.first_headers = fields(args.header_first, "header-first")
    trailers = fields(args.trailer, "trailer")
    body = open(args.data_file, "rb").read() if args.data_file else None
    try:
        # backstop: run() keeps to --timeout itself, plus a few seconds to close the connection
        errors = asyncio.run(asyncio.wait_for(run(args, headers, body, trailers), args.timeout + 5))
    except asyncio.TimeoutError:
        errors = [f"timed out after {args.timeout:g}s (closing the connection)"]
    except Exception as exc:  # connect/handshake/TLS failures
        errors = [LAST_CLOSE[-1] if LAST_CLOSE else f"{type(exc).__name__}: {exc}".rstrip(": ")]
    if errors:
        print("h3client: " + "; ".join(errors), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
