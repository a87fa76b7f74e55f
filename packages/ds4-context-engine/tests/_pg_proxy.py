"""A TCP proxy in front of the test server that loses the answer to one commit, on purpose.

Armed with a marker (bytes of a statement's SQL), it watches the connections it carries. On the first
one whose client sends the marker, it reads the server's messages and, at the first ``ReadyForQuery``
that reports the session idle again (status ``I``: the statement's transaction has committed), it
closes both sides instead of passing that answer on. The server has committed; the client sees a
connection that dropped before the reply, which is the case a retry must not turn into a second row.
The client must connect with ``sslmode=disable&gssencmode=disable`` so that every message is readable.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading

_HEADER = 5  # a message's type byte and its int32 length (which counts itself, not the type)


class CommitDropProxy:
    def __init__(self, host: str, port: int) -> None:
        self._upstream = (host, port)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self._listener.getsockname()[1])
        self._marker: bytes | None = None
        self._lock = threading.Lock()
        self.dropped = threading.Event()
        self._sockets: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def arm(self, marker: bytes) -> None:
        """Drop the next connection that commits a statement holding ``marker``, once."""
        with self._lock:
            self._marker = marker
            self.dropped.clear()

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._listener.close()
        for connection in list(self._sockets):
            with contextlib.suppress(OSError):
                connection.close()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(self._upstream)
            self._sockets += [client, upstream]
            seen = threading.Event()
            threading.Thread(target=self._to_server, args=(client, upstream, seen), daemon=True).start()
            threading.Thread(target=self._to_client, args=(upstream, client, seen), daemon=True).start()

    def _to_server(self, client: socket.socket, upstream: socket.socket, seen: threading.Event) -> None:
        with contextlib.suppress(OSError):
            while data := client.recv(65536):
                with self._lock:
                    if self._marker is not None and self._marker in data:
                        self._marker = None
                        seen.set()
                upstream.sendall(data)
        with contextlib.suppress(OSError):
            upstream.shutdown(socket.SHUT_WR)

    def _to_client(self, upstream: socket.socket, client: socket.socket, seen: threading.Event) -> None:
        buffer = b""
        with contextlib.suppress(OSError):
            while data := upstream.recv(65536):
                buffer += data
                while len(buffer) >= _HEADER:
                    kind = buffer[:1]
                    (length,) = struct.unpack("!i", buffer[1:_HEADER])
                    if len(buffer) < 1 + length:
                        break
                    message, buffer = buffer[: 1 + length], buffer[1 + length :]
                    if seen.is_set() and kind == b"Z" and message[_HEADER:] == b"I":
                        seen.clear()
                        self.dropped.set()
                        for side in (client, upstream):
                            with contextlib.suppress(OSError):
                                side.shutdown(socket.SHUT_RDWR)
                            side.close()
                        return
                    client.sendall(message)
        with contextlib.suppress(OSError):
            client.shutdown(socket.SHUT_WR)
