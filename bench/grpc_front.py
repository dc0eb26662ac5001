"""What the gRPC front's TLS costs: ``sluice dev`` with its front in each TLS mode, and bare gRPC SendMessage calls
(128-byte bodies, ``--concurrency`` in flight on one channel) for ``--duration`` seconds each:

- ``disabled``: grpcio has the port itself (plaintext);
- ``permissive, plaintext``: the same client through Sluice's TLS front (first byte sniffed, bytes piped);
- ``permissive, TLS``: a TLS client through the front (TLS ended in the front).

Prints one JSON line per case: sends/s and the p50 / p99 of a send's round trip. Run on a quiet machine:
``python bench/grpc_front.py``; the figures are in docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import grpc
import numpy as np

from sluice.proxy.protocol import SERVICE, pb


def start_dev(root: Path, mode: str, topic: str) -> tuple[subprocess.Popen[str], int, Path]:
    config = root / "dev.toml"
    config.write_text(f'[broker]\ntls_server_mode = "{mode}"\n')
    proc = subprocess.Popen([sys.executable, "-m", "sluice.cli.main", "dev", "--config", str(config), "--store",
                             str(root / "store"), "--namesrv-port", "0", "--broker-port", "0", "--grpc-port", "0",
                             "--metrics-port", "0", "--no-dashboard"],
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    assert proc.stdout is not None
    banner = ""
    while "Ctrl-C" not in banner:
        line = proc.stdout.readline()
        if not line:
            raise RuntimeError(f"sluice dev did not start: {banner}")
        banner += line
    found = re.search(r"gRPC\s+127\.0\.0\.1:(\d+)", banner)
    namesrv = re.search(r"name server\s+(\S+)", banner)
    assert found is not None and namesrv is not None, banner
    from sluice import Message, Producer

    with Producer("grpc-bench-setup", namesrv=namesrv.group(1)) as producer:  # (auto-created: the front does not)
        producer.send(Message(topic, b"first"))
    return proc, int(found.group(1)), root / "store" / "tls" / "self-signed.pem"


def _request(topic: str, i: int) -> Any:
    m = pb.Message(topic=pb.Resource(name=topic), body=b"x" * 128)
    m.system_properties.message_id = f"01{i:030X}"
    m.system_properties.message_type = 1
    return pb.SendMessageRequest(messages=[m])


async def load(target: str, creds: Any, concurrency: int, duration: float, topic: str) -> dict[str, Any]:
    channel = (grpc.aio.secure_channel(target, creds, options=[("grpc.ssl_target_name_override", "localhost")])
               if creds is not None else grpc.aio.insecure_channel(target))
    async with channel:
        send = channel.unary_unary(f"/{SERVICE}/SendMessage",
                                   request_serializer=pb.SendMessageRequest.SerializeToString,
                                   response_deserializer=pb.SendMessageResponse.FromString)
        for i in range(200):  # warm-up: the topic made, connections up
            r = await send(_request(topic, i), timeout=10)
            assert r.status.code == 20000, r.status
        rtts: list[float] = []
        stop = time.monotonic() + duration
        counter = iter(range(10**9))

        async def worker() -> None:
            while time.monotonic() < stop:
                t0 = time.perf_counter()
                r = await send(_request(topic, next(counter)), timeout=10)
                rtts.append(time.perf_counter() - t0)
                assert r.status.code == 20000, r.status

        t0 = time.monotonic()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        elapsed = time.monotonic() - t0
    ms = np.array(rtts) * 1000
    return {"sends_per_s": round(len(rtts) / elapsed), "p50_ms": round(float(np.percentile(ms, 50)), 3),
            "p99_ms": round(float(np.percentile(ms, 99)), 3)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--duration", type=float, default=8.0)
    p.add_argument("--concurrency", type=int, default=64)
    args = p.parse_args()
    cases = [("disabled", "disabled", False), ("permissive, plaintext", "permissive", False),
             ("permissive, TLS", "permissive", True)]
    for name, mode, use_tls in cases:
        with tempfile.TemporaryDirectory(prefix="sluice-grpc-bench-") as tmp:
            proc, port, cert = start_dev(Path(tmp), mode, "GrpcBench")
            try:
                creds = None
                if use_tls:
                    import socket
                    import ssl
                    ctx = ssl.create_default_context()
                    ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
                    with socket.create_connection(("127.0.0.1", port)) as raw, ctx.wrap_socket(raw):
                        pass  # the first TLS client: the front makes its certificate
                    creds = grpc.ssl_channel_credentials(root_certificates=cert.read_bytes())
                result = asyncio.run(load(f"127.0.0.1:{port}", creds, args.concurrency, args.duration, "GrpcBench"))
            finally:
                proc.terminate()
                proc.wait(30)
        print(json.dumps({"case": name, "concurrency": args.concurrency, "cpus": os.cpu_count(), **result}),
              flush=True)


if __name__ == "__main__":
    main()
