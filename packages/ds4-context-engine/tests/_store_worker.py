"""One process of a fleet, for the concurrency tests: ``python _store_worker.py URL MODE [PATH...]``.

``open``: open the store (migrating it) and print its health. ``index``: index every path, query each
session and record a manifest per path, several rounds; prints one JSON line of what it saw. Waits for
the file named by ``$DS4_WORKER_GO`` to exist before starting, so all processes start together.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

from ds4_context_engine.pi import read_pi_session
from ds4_context_engine.store import open_store


def _wait_for_go() -> None:
    go = os.environ.get("DS4_WORKER_GO")
    deadline = time.monotonic() + 60
    while go and not Path(go).exists() and time.monotonic() < deadline:
        time.sleep(0.005)


def main(url: str, mode: str, paths: list[str]) -> None:
    _wait_for_go()
    store = open_store(url)
    try:
        if mode == "open":
            health = store.health()
            print(json.dumps({"ok": health.ok, "version": health.schema_version}))
            return
        hits = 0
        modes = []
        for _ in range(3):
            for path in paths:
                report = store.index_file(path)
                modes.append(report.mode)
                session_id = read_pi_session(path).session_id
                hits += len(store.search(session_id, "parser test trim", match="any"))
                store.record_manifest(session_id, json.dumps({"pid": os.getpid()}))
        print(json.dumps({"modes": modes, "hits": hits, "events": list(store.health().events)}))
    finally:
        store.close()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3:])
