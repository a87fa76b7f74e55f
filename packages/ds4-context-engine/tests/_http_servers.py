"""Small real HTTP servers on 127.0.0.1 for transport and discovery tests.

A ``ScriptedServer`` answers each (method, path) from a queue of ``Reply`` values (the last one repeats)
or from a function of the recorded request, and records every request it received. A reply with
``stream`` sends its pieces one by one (``drip_s`` apart) without a Content-Length and then closes the
connection, the way a misbehaving server drips or floods a body; ``sent_bytes`` counts what went out.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Reply:
    status: int = 200
    body: Any = None
    raw: bytes | None = None
    headers: dict[str, str] = field(default_factory=dict)
    delay_s: float = 0.0
    wait_for: threading.Event | None = None
    stream: Callable[[], Iterable[bytes]] | None = None
    drip_s: float = 0.0


@dataclass
class Recorded:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    client_port: int = 0

    def json(self) -> Any:
        return json.loads(self.body)


Responder = Callable[[Recorded], Reply]


class ScriptedServer:
    def __init__(self) -> None:
        self.routes: dict[tuple[str, str], list[Reply] | Responder] = {}
        self.requests: list[Recorded] = []
        self.sent_bytes = 0
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                return

            def _handle(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                recorded = Recorded(
                    self.command,
                    self.path,
                    {k.lower(): v for k, v in self.headers.items()},
                    body,
                    self.client_address[1],
                )
                reply = server._reply_for(recorded)
                if reply.wait_for is not None:
                    reply.wait_for.wait(timeout=5)
                if reply.delay_s:
                    time.sleep(reply.delay_s)
                if reply.stream is not None:
                    self._stream(reply)
                    return
                payload = reply.raw if reply.raw is not None else json.dumps(reply.body).encode()
                try:
                    self.send_response(reply.status)
                    headers = {"Content-Type": "application/json", **reply.headers}
                    for name, value in headers.items():
                        self.send_header(name, value)
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                except (BrokenPipeError, ConnectionResetError):
                    pass

            def _stream(self, reply: Reply) -> None:
                self.close_connection = True  # the body ends when the connection does
                try:
                    self.send_response(reply.status)
                    for name, value in {"Content-Type": "application/json", **reply.headers}.items():
                        self.send_header(name, value)
                    self.send_header("Connection", "close")
                    self.end_headers()
                    self.wfile.flush()
                    for piece in reply.stream():  # type: ignore[misc]
                        if reply.drip_s:
                            time.sleep(reply.drip_s)
                        self.wfile.write(piece)
                        self.wfile.flush()
                        with server._lock:
                            server.sent_bytes += len(piece)
                except (BrokenPipeError, ConnectionResetError):
                    pass

            def do_GET(self) -> None:
                self._handle()

            def do_POST(self) -> None:
                self._handle()

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.01,), daemon=True)

    def _reply_for(self, recorded: Recorded) -> Reply:
        with self._lock:
            self.requests.append(recorded)
            route = self.routes.get((recorded.method, recorded.path.split("?", 1)[0]))
            if route is None:
                return Reply(status=404, body={"error": {"message": "not found"}})
            if callable(route):
                return route(recorded)
            return route.pop(0) if len(route) > 1 else route[0]

    def on(self, method: str, path: str, *replies: Reply | Responder) -> None:
        if len(replies) == 1 and callable(replies[0]):
            self.routes[(method, path)] = replies[0]
        else:
            self.routes[(method, path)] = list(replies)  # type: ignore[arg-type]

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def __enter__(self) -> ScriptedServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)


def closed_port_url() -> str:
    """A URL on 127.0.0.1 where nothing listens (the port was bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}"
