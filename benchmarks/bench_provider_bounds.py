"""Provider answers from hostile servers: peak memory and time of one call, ours against plain httpx.

Run: uv run --no-config --no-sync python benchmarks/bench_provider_bounds.py [--bomb-mib N] [--flood-mib N]

A server on 127.0.0.1 answers with a gzip bomb (N MiB of spaces, ~N KiB on the wire) or an N MiB flood
without a Content-Length. Each reader runs in a fresh process, so its peak resident memory (``ru_maxrss``
minus the same process's peak before the call) is its own: the peer is httpx as the transports used it
before (``client.post(...)`` then ``response.content``, the cap checked afterwards), ours is
``OpenAIChatTransport.complete``, which stops at the 32 MiB decoded cap.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import threading
import zlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

MIB = 1024 * 1024

_CHILD = r"""
import json, resource, sys, time
import anyio, httpx
from ds4_context_core import ModelDescriptor
from ds4_context_core.adapter import CompletionRequest
from ds4_context_engine.providers import OpenAIChatTransport
from ds4_context_core import CanonicalMessage, Provenance, TextBlock

url, reader = sys.argv[1], sys.argv[2]
message = CanonicalMessage(id="m", source_entry_id="e", role="user", blocks=(TextBlock(text="hi"),),
                           provenance=Provenance(source="pi-session", session_id="s", entry_id="e"))
request = CompletionRequest.from_messages((message,), model=ModelDescriptor(provider="openai", id="m",
                                          context_window=1000))

async def peer():
    async with httpx.AsyncClient() as client:
        response = await client.post(url + "/v1/chat/completions", content=b"{}", timeout=60)
        return len(response.content) > 32 * 1024 * 1024

async def ours():
    transport = OpenAIChatTransport(base_url=url + "/v1", api_key="k", api_key_env=None, timeout_s=60)
    async with transport:
        result = await transport.complete(request)
    return result.status == "fallback" and "too large" in result.failure.reason

anyio.run(lambda: anyio.sleep(0))  # imports and the event loop, before the baseline
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
started = time.perf_counter()
refused = anyio.run(peer if reader == "peer" else ours)
elapsed = time.perf_counter() - started
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"refused": refused, "peak_mib": (after - before) / 1024, "seconds": elapsed}))
"""


def _bomb(mib: int) -> bytes:
    packer = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    parts = [packer.compress(b" " * MIB) for _ in range(mib)]
    return b"".join([*parts, packer.flush()])


def _server(kind: str, mib: int) -> ThreadingHTTPServer:
    bomb = _bomb(mib) if kind == "bomb" else b""

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            return

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            try:
                if kind == "bomb":
                    self.send_header("Content-Encoding", "gzip")
                    self.send_header("Content-Length", str(len(bomb)))
                    self.end_headers()
                    self.wfile.write(bomb)
                else:
                    self.end_headers()
                    for _ in range(mib):
                        self.wfile.write(b" " * MIB)
            except (BrokenPipeError, ConnectionResetError):
                pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def _measure(url: str, reader: str) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, url, reader], capture_output=True, text=True, check=True, timeout=300
    )
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--bomb-mib", type=int, default=512)
    parser.add_argument("--flood-mib", type=int, default=300)
    args = parser.parse_args()
    for kind, mib in (("bomb", args.bomb_mib), ("flood", args.flood_mib)):
        server = _server(kind, mib)
        url = f"http://127.0.0.1:{server.server_address[1]}"
        try:
            peer, ours = _measure(url, "peer"), _measure(url, "ours")
        finally:
            server.shutdown()
            server.server_close()
        print(
            f"{kind} {mib} MiB: httpx read-then-cap {peer['peak_mib']:.0f} MiB {peer['seconds']:.2f} s, "
            f"bounded transport {ours['peak_mib']:.0f} MiB {ours['seconds']:.2f} s "
            f"(memory ratio {peer['peak_mib'] / max(ours['peak_mib'], 1):.1f}x, refused: {ours['refused']})"
        )


if __name__ == "__main__":
    main()
