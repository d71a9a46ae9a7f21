#!/usr/bin/env python3
"""grpc_echo.py: a gRPC server and client (PyPI grpcio) for the reverse-proxy tests.

Messages are raw bytes (no protobuf): the methods echo what they get.

  python3 scripts/grpc_echo.py serve PORT
      h2c server on 127.0.0.1:PORT with
        /echo.Echo/Unary     returns the request
        /echo.Echo/Stream    returns the request 5 times (server streaming)
        /echo.Echo/Collect   client streaming: returns the total length as text
        /echo.Echo/Fail      aborts with NOT_FOUND and details "no such thing"
  python3 scripts/grpc_echo.py call TARGET [--ca FILE [--name HOST]]
      calls each method through TARGET (host:port; TLS with --ca, verifying TARGET's host or
      HOST)
      and prints one JSON object: {"unary": bool, "stream": n, "collect": "N", "fail_code": "...",
      "fail_details": "..."}. Exit status 0 when every call behaved, 1 otherwise.
  python3 scripts/grpc_echo.py slow TARGET SECONDS
      one client-streaming call (h2c) that sends a 1 KiB message every 50 ms for SECONDS and
      prints {"sent": N, "collected": "M"}; exit status 0 when the server got every byte.
"""
import time
import json
import sys
from concurrent import futures

import grpc

MESSAGE = bytes(range(256)) * 400  # 100 KiB


def serve(port):
    def unary(req, ctx):
        return req

    def stream(req, ctx):
        for _ in range(5):
            yield req

    def collect(reqs, ctx):
        return str(sum(len(r) for r in reqs)).encode()

    def fail(req, ctx):
        ctx.abort(grpc.StatusCode.NOT_FOUND, "no such thing")

    handlers = {
        "Unary": grpc.unary_unary_rpc_method_handler(unary),
        "Stream": grpc.unary_stream_rpc_method_handler(stream),
        "Collect": grpc.stream_unary_rpc_method_handler(collect),
        "Fail": grpc.unary_unary_rpc_method_handler(fail),
    }
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("echo.Echo", handlers),))
    server.add_insecure_port(f"127.0.0.1:{port}")
    server.start()
    print("ready", flush=True)
    server.wait_for_termination(timeout=600)


def call(target, ca, name):
    if ca:
        with open(ca, "rb") as f:
            creds = grpc.ssl_channel_credentials(root_certificates=f.read())
        options = [("grpc.ssl_target_name_override", name)] if name else []
        channel = grpc.secure_channel(target, creds, options=options)
    else:
        channel = grpc.insecure_channel(target)
    out = {}
    ok = True
    with channel:
        grpc.channel_ready_future(channel).result(timeout=20)
        got = channel.unary_unary("/echo.Echo/Unary")(MESSAGE, timeout=20)
        out["unary"] = got == MESSAGE
        ok &= out["unary"]
        parts = list(channel.unary_stream("/echo.Echo/Stream")(MESSAGE, timeout=20))
        out["stream"] = len(parts)
        ok &= len(parts) == 5 and all(p == MESSAGE for p in parts)
        out["collect"] = channel.stream_unary("/echo.Echo/Collect")(iter([MESSAGE] * 3), timeout=20).decode()
        ok &= out["collect"] == str(3 * len(MESSAGE))
        try:
            channel.unary_unary("/echo.Echo/Fail")(b"x", timeout=20)
            out["fail_code"] = "OK"
            ok = False
        except grpc.RpcError as e:
            out["fail_code"] = e.code().name
            out["fail_details"] = e.details()
            ok &= e.code() == grpc.StatusCode.NOT_FOUND and e.details() == "no such thing"
    print(json.dumps(out), flush=True)
    return 0 if ok else 1


def slow(target, seconds):
    sent = 0
    end = time.monotonic() + seconds

    def messages():
        nonlocal sent
        while time.monotonic() < end:
            sent += 1024
            yield b"x" * 1024
            time.sleep(0.05)

    with grpc.insecure_channel(target) as channel:
        grpc.channel_ready_future(channel).result(timeout=20)
        got = channel.stream_unary("/echo.Echo/Collect")(messages(), timeout=seconds + 30).decode()
    print(json.dumps({"sent": sent, "collected": got}), flush=True)
    return 0 if got == str(sent) else 1


def main():
    if len(sys.argv) >= 4 and sys.argv[1] == "slow":
        return slow(sys.argv[2], float(sys.argv[3]))
    if len(sys.argv) >= 3 and sys.argv[1] == "serve":
        serve(int(sys.argv[2]))
        return 0
    if len(sys.argv) >= 3 and sys.argv[1] == "call":
        args = sys.argv[3:]
        ca = args[args.index("--ca") + 1] if "--ca" in args else None
        name = args[args.index("--name") + 1] if "--name" in args else None
        return call(sys.argv[2], ca, name)
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
