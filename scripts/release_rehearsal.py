"""Rehearse a release without publishing: build, serve a local index on 127.0.0.1, run the registry check.

Usage: ``release_rehearsal.py [--dist DIR] [--python 3.12 ...] [--keep]``.

1. The distributions: ``--dist DIR`` takes what ``nox -s build`` left in ``dist/`` (sdists, pure wheels
   and the compiled core wheels); without it, ``uv build --all-packages --no-sources --no-config`` builds
   the sdists and pure wheels of the checkout into the work directory.
2. They are "uploaded" to a PEP 503 simple index: a directory with ``simple/<project>/index.html`` pages
   whose links carry each file's ``#sha256=``, as PyPI's do.
3. ``python -m http.server`` serves that directory on 127.0.0.1 (a free port), and
   ``registry_check.py <version> --index-url http://127.0.0.1:<port>/simple/`` runs against it, with the
   same ``--python`` values, exactly as it will after the real upload.
4. The server is stopped (by its process id) and the work directory removed unless ``--keep``.

Codes: REH001 no distributions, or files of more than one version, in the directory; REH002 the build
failed; REH003 the local index did not start. The registry check's own codes (REG001-REG015) pass
through unchanged.
"""

from __future__ import annotations

import argparse
import html
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Sequence
from pathlib import Path

from _dists import sha256_file
from _release import DISTRIBUTIONS, ROOT, ReleaseError, report
from registry_check import _uv, registry_check

__all__ = ["build", "main", "rehearse", "serve_index", "write_simple_index"]

_SERVER_START_SECONDS = 30.0


def _version_of(files: list[Path]) -> str:
    """The one version the release files share (REH001 when there are none or several)."""
    versions = set()
    for path in files:
        for dist in DISTRIBUTIONS:
            prefix = f"{dist.file_stem}-"
            if path.name.startswith(prefix):
                versions.add(path.name[len(prefix) :].split("-", 1)[0].removesuffix(".tar.gz"))
    if len(versions) != 1:
        found = ", ".join(sorted(versions)) or "none"
        raise ReleaseError("REH001", f"expected the files of one release version, found: {found}")
    return versions.pop()


def build(out: Path) -> list[Path]:
    """Sdists and pure wheels of the checkout, built as ``nox -s build`` builds them (REH002)."""
    result = subprocess.run(
        [_uv(), "build", "--all-packages", "--no-sources", "--no-config", "--out-dir", str(out)],
        cwd=ROOT,
        check=False,
        capture_output=True,
        text=True,
    )
    if result.returncode != 0:
        raise ReleaseError("REH002", f"uv build failed (exit {result.returncode}): {result.stderr[-1500:]}")
    return sorted(out.iterdir())


def write_simple_index(files: list[Path], root: Path) -> Path:
    """A PEP 503 index of ``files`` under ``root``: ``files/`` holds them, ``simple/`` links them."""
    stored = root / "files"
    stored.mkdir(parents=True)
    projects: dict[str, list[Path]] = {}
    for path in files:
        dist = next((d for d in DISTRIBUTIONS if path.name.startswith(f"{d.file_stem}-")), None)
        if dist is None or not path.name.endswith((".whl", ".tar.gz")):
            continue  # not a release file of ours (a log, a checksum list)
        projects.setdefault(dist.name, []).append(Path(shutil.copy2(path, stored / path.name)))
    if not projects:
        raise ReleaseError("REH001", "no sdist or wheel of the three distributions to serve")
    simple = root / "simple"
    simple.mkdir()
    names = "".join(f'<a href="{name}/">{name}</a>\n' for name in sorted(projects))
    (simple / "index.html").write_text(f"<!DOCTYPE html>\n<html><body>\n{names}</body></html>\n")
    for name, paths in projects.items():
        page = simple / name
        page.mkdir()
        links = "".join(
            f'<a href="../../files/{html.escape(path.name)}#sha256={sha256_file(path)}">'
            f"{html.escape(path.name)}</a>\n"
            for path in sorted(paths)
        )
        (page / "index.html").write_text(f"<!DOCTYPE html>\n<html><body>\n{links}</body></html>\n")
    return simple


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def serve_index(root: Path) -> tuple[subprocess.Popen[bytes], str]:
    """``python -m http.server`` over ``root`` on 127.0.0.1 and the simple index URL (REH003)."""
    port = _free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1", "--directory", str(root)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}/simple/"
    deadline = time.monotonic() + _SERVER_START_SECONDS
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise ReleaseError("REH003", f"the local index exited at once (status {process.returncode})")
        try:
            with urllib.request.urlopen(url, timeout=2):  # our own server on 127.0.0.1
                return process, url
        except OSError:
            time.sleep(0.1)
    _stop(process)
    raise ReleaseError("REH003", f"the local index did not answer on {url}")


def _stop(process: subprocess.Popen[bytes]) -> None:
    process.terminate()
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def _say(line: str) -> None:
    sys.stdout.write(f"{line}\n")
    sys.stdout.flush()


def rehearse(dist: Path | None, work: Path, pythons: Sequence[str] = ()) -> str:
    """Every step; returns the version rehearsed. Raises :class:`ReleaseError` at the first failing one."""
    files = sorted(dist.iterdir()) if dist is not None else build(work / "dist")
    version = _version_of([path for path in files if path.name.endswith((".whl", ".tar.gz"))])
    write_simple_index(files, work / "index")
    _say(f"ok: {len(list((work / 'index' / 'files').iterdir()))} files of {version} on a local PEP 503 index")
    process, url = serve_index(work / "index")
    try:
        _say(f"ok: serving it on {url}")
        registry_check(version, url, work / "check", pythons)
    finally:
        _stop(process)
    return version


def main(argv: Sequence[str] | None = None) -> int:
    """Command line entry point."""
    parser = argparse.ArgumentParser(description="Rehearse a release on a local index, then check it.")
    parser.add_argument("--dist", type=Path, help="release files to serve (default: build the checkout)")
    parser.add_argument(
        "--python", action="append", default=[], help="passed to the registry check (repeatable)"
    )
    parser.add_argument("--keep", action="store_true", help="keep the work directory for inspection")
    args = parser.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="ds4-release-rehearsal-"))
    (work / "check").mkdir()
    try:
        version = rehearse(args.dist, work, args.python)
    except ReleaseError as exc:
        return report([exc], ok="")
    finally:
        if args.keep:
            sys.stderr.write(f"work directory kept: {work}\n")
        else:
            shutil.rmtree(work, ignore_errors=True)
    return report([], ok=f"release rehearsal passed: {version} from a local index")


if __name__ == "__main__":
    raise SystemExit(main())
