"""Prove a published release: download it from an index, verify it, install it clean, rerun conformance.

Usage: ``registry_check.py 0.1.0 [--index-url https://pypi.org/simple/] [--python 3.12 ...]``. Only an exact
release version is accepted. For each of the three distributions it reads the index's project page,
downloads that version's wheel with an isolated client (``pip download --isolated --no-deps --only-binary
:all:``, so no local configuration, find-links or cache can answer instead of the index), and checks that
the file's sha256 matches the index's ``#sha256=`` link, that its METADATA carries the right name and
version, and that the adapters pin core exactly. It then creates a clean venv (``uv venv``), installs the
third-party dependencies the wheels declare, installs the three downloaded wheels with no index at all,
checks what got installed and runs ``ds4-context-conformance`` against the reference adapter from that venv.

``--python`` (repeatable; default: the interpreter running the check) names the Pythons to install on,
as ``uv venv --python`` takes them (``3.12``, a path). For each, core's wheel is downloaded for that
Python's version (``--python-version``), so the cp312 and cp313 compiled wheels are fetched, verified and
installed where they are listed, and each venv runs conformance.

Each distribution's sdist must be listed too, with its sha256: it is downloaded, checked against the
digest, built into a wheel (``uv build --wheel``, with the workspace's pinned build backend) and that
wheel must hold exactly the released pure wheel's files, byte for byte.

When the index also lists compiled core wheels (``cp311-cp311-manylinux_2_17_x86_64...``), one pure
``py3-none-any`` core wheel must still be listed (the fallback for every other platform); the download
for this platform and Python must be the compiled wheel the index lists for it (judged by this
interpreter's CPython version, architecture and glibc), a second isolated download for another platform
(``--platform any``) must be the pure one, both are checked against the index's sha256, and the clean venv
must import the privacy hot path from the compiled extension module, not from ``_privacy/_walk.py``. With
only pure wheels on the index, the venv must import ``_privacy/_walk.py``.

Codes: REG001 not an exact version, REG002 index page unreachable, REG003 the version's wheel or its
sha256 is not listed, REG004 download failed, REG005 sha256 mismatch, REG006 name or version mismatch,
REG007 sibling pin mismatch, REG008 install failed, REG009 installed version or location wrong, REG010
conformance failed, REG011 environment problem (no uv, no venv), REG012 pip chose another core wheel than
the one the index lists for this platform and Python (or for other platforms), REG013 the clean venv
imports the privacy hot path from the wrong kind of module, REG014 the version's sdist (or its sha256) is
not listed, REG015 the wheel built from an sdist differs from the released wheel (or cannot be built).
"""

from __future__ import annotations

import argparse
import html.parser
import importlib
import importlib.util
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import tomllib
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from _dists import WheelFile, read_wheel, sha256_file, sibling_pin_problems, third_party_requirements
from _release import DISTRIBUTIONS, ROOT, Distribution, ReleaseError, is_release_version, report

__all__ = [
    "IndexFile",
    "Listing",
    "index_files",
    "main",
    "matches_interpreter",
    "matches_this_interpreter",
    "registry_check",
]

DEFAULT_INDEX = "https://pypi.org/simple/"
CONFORMANCE_TARGET = "ds4_context_reference_adapter:conformance_factory"
_TAIL = 1500
PURE_TAGS = "py3-none-any"
HOT_PATH = "ds4_context_core._privacy._walk"
_WHEEL_TAGS = re.compile(
    r"[^-]+-[^-]+(?:-\d[^-]*)?-(?P<python>[^-]+)-(?P<abi>[^-]+)-(?P<platform>[^-]+)\.whl"
)
_MANYLINUX = re.compile(
    r"(?:manylinux_(?P<major>\d+)_(?P<minor>\d+)|(?P<legacy>manylinux1|manylinux2010|manylinux2014))_(?P<arch>.+)"
)
_LEGACY_GLIBC = {"manylinux1": (2, 5), "manylinux2010": (2, 12), "manylinux2014": (2, 17)}


@dataclass(frozen=True)
class IndexFile:
    """One file link on a PEP 503 project page."""

    filename: str
    url: str
    sha256: str | None


class _Links(html.parser.HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.hrefs: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":
            self.hrefs += [value for key, value in attrs if key == "href" and value]


def index_files(index_url: str, dist: Distribution) -> list[IndexFile]:
    """The files listed on a project's simple page. Raises REG002 when the page cannot be read."""
    page = urllib.parse.urljoin(index_url.rstrip("/") + "/", f"{dist.name}/")
    try:
        with urllib.request.urlopen(page, timeout=60) as response:  # noqa: S310 - the URL is the user's index
            text = response.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            raise ReleaseError("REG003", f"{dist.name} is not on the index ({page}: 404)") from exc
        raise ReleaseError("REG002", f"cannot read {page}: {exc}") from exc
    except (OSError, ValueError) as exc:
        raise ReleaseError("REG002", f"cannot read {page}: {exc}") from exc
    links = _Links()
    links.feed(text)
    files = []
    for href in links.hrefs:
        url = urllib.parse.urljoin(page, href)
        parts = urllib.parse.urlsplit(url)
        filename = urllib.parse.unquote(parts.path.rsplit("/", 1)[-1])
        fragment = urllib.parse.parse_qs(parts.fragment)
        files.append(IndexFile(filename, url, fragment.get("sha256", [None])[0]))
    return files


def _tail(text: str) -> str:
    text = text.strip()
    return text if len(text) <= _TAIL else "..." + text[-_TAIL:]


def _run(args: list[str], code: str, what: str, *, cwd: Path | None = None) -> str:
    env = {k: v for k, v in os.environ.items() if k not in {"PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV"}}
    result = subprocess.run(args, check=False, capture_output=True, text=True, cwd=cwd, env=env)
    if result.returncode != 0:
        raise ReleaseError(
            code, f"{what} failed (exit {result.returncode}): {_tail(result.stderr or result.stdout)}"
        )
    return result.stdout


def _uv() -> str:
    try:
        return str(importlib.import_module("uv").find_uv_bin())
    except (ImportError, FileNotFoundError, AttributeError):
        found = shutil.which("uv")
        if found is None:
            raise ReleaseError(
                "REG011", "uv is needed to install into the clean venv and was not found"
            ) from None
        return found


def _say(line: str) -> None:
    sys.stdout.write(f"{line}\n")
    sys.stdout.flush()


def _verify(wheel: WheelFile, dist: Distribution, version: str, listed: IndexFile) -> list[ReleaseError]:
    problems = []
    digest = sha256_file(wheel.path)
    if digest != listed.sha256:
        problems.append(
            ReleaseError(
                "REG005", f"{wheel.path.name}: sha256 {digest} differs from the index's {listed.sha256}"
            )
        )
    meta = (str(wheel.metadata.get("Name")), str(wheel.metadata.get("Version")))
    if wheel.name != dist.name or meta != (dist.name, version) or wheel.version != version:
        problems.append(
            ReleaseError(
                "REG006",
                f"{wheel.path.name}: METADATA says {meta[0]} {meta[1]}, expected {dist.name} {version}",
            )
        )
    problems += sibling_pin_problems(wheel, version, "REG007")
    return problems


_INSPECT = """
import importlib, importlib.metadata as md, json, sys
out = {}
for dist, package in json.loads(sys.argv[1]):
    module = importlib.import_module(package)
    out[dist] = [md.version(dist), getattr(module, "__version__", None), module.__file__]
out[sys.argv[2]] = importlib.import_module(sys.argv[2]).__file__
print(json.dumps(out))
"""


@dataclass(frozen=True)
class Listing:
    """What the index lists at one version: each distribution's pure wheel, and core's compiled wheels."""

    pure: dict[str, IndexFile]
    compiled: tuple[IndexFile, ...]
    sdists: dict[str, IndexFile]

    def for_this_interpreter(self) -> tuple[IndexFile, ...]:
        """The compiled core wheels this interpreter and platform can install."""
        return self.for_python(sys.version_info[:2])

    def for_python(self, python: tuple[int, int]) -> tuple[IndexFile, ...]:
        """The compiled core wheels CPython ``python`` (major, minor) can install on this platform."""
        return tuple(f for f in self.compiled if matches_interpreter(f.filename, python))


def _glibc() -> tuple[int, int] | None:
    try:
        text = os.confstr("CS_GNU_LIBC_VERSION") or ""
    except (AttributeError, ValueError, OSError):
        return None
    match = re.fullmatch(r"glibc (\d+)\.(\d+).*", text)
    return None if match is None else (int(match[1]), int(match[2]))


def matches_this_interpreter(filename: str) -> bool:
    """Whether a CPython wheel's tags fit the running interpreter: its version and ABI, and a platform tag
    that is this machine's own or a manylinux policy its architecture and glibc satisfy."""
    return matches_interpreter(filename, sys.version_info[:2])


def matches_interpreter(filename: str, python: tuple[int, int]) -> bool:
    """:func:`matches_this_interpreter` for CPython ``python`` (major, minor) on this machine."""
    match = _WHEEL_TAGS.fullmatch(filename)
    ours = f"cp{python[0]}{python[1]}"
    if match is None or sys.implementation.name != "cpython":
        return False
    if ours not in match["python"].split(".") or ours not in match["abi"].split("."):
        return False
    machine = platform.machine().lower()
    own = re.sub(r"[-.]", "_", sysconfig.get_platform())
    glibc = _glibc()
    for tag in match["platform"].split("."):
        if tag == own:
            return True
        manylinux = _MANYLINUX.fullmatch(tag)
        if manylinux is None or not sys.platform.startswith("linux") or glibc is None:
            continue
        if manylinux["legacy"]:
            needed = _LEGACY_GLIBC[manylinux["legacy"]]
        else:
            needed = (int(manylinux["major"]), int(manylinux["minor"]))
        if manylinux["arch"] == machine and needed <= glibc:
            return True
    return False


def _listed_wheels(index_url: str, version: str) -> Listing:
    """Step 1: one pure wheel per distribution at ``version`` (core may add compiled ones), with sha256."""
    pure: dict[str, IndexFile] = {}
    compiled: list[IndexFile] = []
    sdists: dict[str, IndexFile] = {}
    for dist in DISTRIBUTIONS:
        prefix = f"{dist.file_stem}-{version}-"
        files = index_files(index_url, dist)
        candidates = [f for f in files if f.filename.startswith(prefix) and f.filename.endswith(".whl")]
        sdist = [f for f in files if f.filename == f"{dist.file_stem}-{version}.tar.gz"]
        for candidate in candidates:
            if not candidate.sha256:
                raise ReleaseError("REG003", f"{index_url}: {candidate.filename} is listed without #sha256=")
        pure_ones = [f for f in candidates if f.filename.endswith(f"-{PURE_TAGS}.whl")]
        others = [f for f in candidates if f not in pure_ones]
        if dist == DISTRIBUTIONS[0] and others:
            if len(pure_ones) != 1:
                raise ReleaseError(
                    "REG003",
                    f"{index_url}: expected one pure {dist.name} {version} wheel beside its compiled ones "
                    f"(the fallback for every other platform), the index lists {len(pure_ones)}",
                )
            compiled += others
        elif len(candidates) != 1 or len(pure_ones) != 1:
            raise ReleaseError(
                "REG003",
                f"{index_url}: expected one {dist.name} {version} wheel ({PURE_TAGS}), the index lists "
                f"{', '.join(f.filename for f in candidates) or 'none'}",
            )
        pure[dist.name] = pure_ones[0]
        if len(sdist) != 1 or not sdist[0].sha256:
            raise ReleaseError(
                "REG014", f"{index_url}: expected the {dist.name} {version} sdist with a #sha256= digest"
            )
        sdists[dist.name] = sdist[0]
    return Listing(pure, tuple(compiled), sdists)


def _pip_download(index_url: str, requirements: list[str], dest: Path, *options: str) -> None:
    _run(
        [
            sys.executable, "-m", "pip", "download", "--isolated", "--no-deps", "--only-binary", ":all:",
            "--no-cache-dir", "--disable-pip-version-check", "--no-input", "--quiet",
            "--index-url", index_url, "--dest", str(dest), *options, *requirements,
        ],
        "REG004",
        "pip download",
    )  # fmt: skip


def _downloaded(dest: Path, dist: Distribution, version: str) -> Path:
    found = sorted(dest.glob(f"{dist.file_stem}-{version}-*.whl"))
    if len(found) != 1:
        raise ReleaseError(
            "REG004", f"pip downloaded {len(found)} {dist.name} {version} wheels, expected one"
        )
    return found[0]


def _download_and_verify(index_url: str, version: str, listing: Listing, downloads: Path) -> list[WheelFile]:
    """Step 2: an isolated pip downloads the three wheels; each must match the index and pin core exactly.

    Core's is the compiled wheel the index lists for this platform and Python when there is one, else the
    pure one; with compiled wheels listed, a download for another platform must give the pure one.
    """
    if importlib.util.find_spec("pip") is None:
        raise ReleaseError(
            "REG011", f"pip is needed for the isolated download and is missing in {sys.prefix}"
        )
    _pip_download(index_url, [f"{dist.name}=={version}" for dist in DISTRIBUTIONS], downloads)
    core = DISTRIBUTIONS[0]
    expected_core = listing.for_this_interpreter() or (listing.pure[core.name],)
    wheels: list[WheelFile] = []
    problems: list[ReleaseError] = []
    for dist in DISTRIBUTIONS:
        path = _downloaded(downloads, dist, version)
        candidates = expected_core if dist == core else (listing.pure[dist.name],)
        listed = next((f for f in candidates if f.filename == path.name), None)
        if listed is None:
            names = ", ".join(f.filename for f in candidates)
            raise ReleaseError(
                "REG012",
                f"pip downloaded {path.name} for this platform and Python; the index lists {names} for it",
            )
        try:
            wheel = read_wheel(path)
        except ReleaseError as exc:
            raise ReleaseError("REG006", exc.message) from exc
        problems += _verify(wheel, dist, version, listed)
        wheels.append(wheel)
    if listing.compiled:
        # Every other platform gets the pure wheel: pip told that the target is "any" platform must take it.
        other = downloads.parent / "download-other-platform"
        python = f"{sys.version_info.major}.{sys.version_info.minor}"
        _pip_download(
            index_url, [f"{core.name}=={version}"], other, "--platform", "any", "--python-version", python
        )
        path = _downloaded(other, core, version)
        fallback = listing.pure[core.name]
        if path.name != fallback.filename:
            raise ReleaseError(
                "REG012",
                f"pip downloaded {path.name} for another platform, expected the pure {fallback.filename}",
            )
        problems += _verify(read_wheel(path), core, version, fallback)
    if len(problems) > 1:
        raise ReleaseError(problems[0].code, "; ".join(map(str, problems)))
    if problems:
        raise problems[0]
    return wheels


def _make_venv(python: str, venv: Path) -> tuple[Path, tuple[int, int]]:
    """A clean venv on ``python`` (as ``uv venv --python`` takes it) and that Python's (major, minor)."""
    _run(
        [_uv(), "venv", "--no-config", "--python", python, str(venv)],
        "REG011",
        f"creating a venv on {python}",
    )
    interpreter = venv / ("Scripts/python.exe" if os.name == "nt" else "bin/python")
    found = _run(
        [str(interpreter), "-c", "import sys; print(sys.implementation.name, *sys.version_info[:2])"],
        "REG011",
        f"asking the {python} venv its version",
    ).split()
    if len(found) != 3 or found[0] != "cpython":
        raise ReleaseError("REG011", f"{python} is not a CPython: the release has wheels for CPython")
    return interpreter, (int(found[1]), int(found[2]))


def _core_for(
    index_url: str, version: str, listing: Listing, *, python: tuple[int, int], host: WheelFile, work: Path
) -> tuple[WheelFile, bool]:
    """Core's wheel for CPython ``python`` on this platform, downloaded for that version and verified, and
    whether it is a compiled one. The host's own download stands for the running interpreter's version."""
    core = DISTRIBUTIONS[0]
    expected = listing.for_python(python) or (listing.pure[core.name],)
    if python == sys.version_info[:2]:
        return host, bool(listing.for_python(python))
    dest = work / f"download-cp{python[0]}{python[1]}"
    _pip_download(
        index_url, [f"{core.name}=={version}"], dest, "--python-version", f"{python[0]}.{python[1]}"
    )
    path = _downloaded(dest, core, version)
    listed = next((f for f in expected if f.filename == path.name), None)
    if listed is None:
        names = ", ".join(f.filename for f in expected)
        raise ReleaseError(
            "REG012",
            f"pip downloaded {path.name} for CPython {python[0]}.{python[1]}; the index lists {names}",
        )
    wheel = read_wheel(path)
    problems = _verify(wheel, core, version, listed)
    if problems:
        raise ReleaseError(problems[0].code, "; ".join(map(str, problems)))
    return wheel, bool(listing.for_python(python))


def _install_clean(
    python: Path, wheels: list[WheelFile], version: str, work: Path, *, compiled: bool
) -> Path:
    """Step 3: a clean venv gets the dependencies, then the downloaded wheels with no index at all;
    ``compiled``: the privacy hot path must be imported from core's extension module."""
    uv = _uv()
    venv = python.parent.parent
    files = work / "install"
    files.mkdir()
    for wheel in wheels:
        shutil.copy2(wheel.path, files / wheel.path.name)
    dependencies = third_party_requirements(wheels)
    if dependencies:
        _run(
            [uv, "pip", "install", "--python", str(python), *dependencies],
            "REG008",
            "installing dependencies",
        )
    _run(
        [
            uv, "pip", "install", "--python", str(python), "--no-config", "--no-index", "--no-cache",
            "--find-links", str(files), *(f"{dist.name}=={version}" for dist in DISTRIBUTIONS),
        ],
        "REG008",
        "installing the downloaded wheels with no index",
    )  # fmt: skip
    pairs = json.dumps([[dist.name, dist.package] for dist in DISTRIBUTIONS])
    installed = json.loads(
        _run(
            [str(python), "-c", _INSPECT, pairs, HOT_PATH],
            "REG009",
            "importing the installed packages",
            cwd=work,
        )
    )
    for dist in DISTRIBUTIONS:
        meta_version, dunder, location = installed[dist.name]
        if meta_version != version or dunder != version:
            raise ReleaseError(
                "REG009", f"{dist.name}: installed {meta_version} (__version__ {dunder}), expected {version}"
            )
        if not Path(location).resolve().is_relative_to(venv.resolve()):
            raise ReleaseError("REG009", f"{dist.package} imports from {location}, not from the clean venv")
    hot_path = Path(installed[HOT_PATH])
    is_extension = hot_path.suffix in {".so", ".pyd"}
    if is_extension != compiled or not hot_path.resolve().is_relative_to(venv.resolve()):
        wanted = "the compiled extension module" if compiled else "_privacy/_walk.py (pure wheel)"
        raise ReleaseError("REG013", f"the clean venv imports {HOT_PATH} from {hot_path}, expected {wanted}")
    return venv


def _fetch(listed: IndexFile, dest: Path) -> Path:
    """``listed`` downloaded into ``dest`` and checked against the index's sha256 (REG004, REG005)."""
    dest.mkdir(parents=True, exist_ok=True)
    path = dest / listed.filename
    try:
        with urllib.request.urlopen(listed.url, timeout=120) as response, path.open("wb") as out:  # noqa: S310
            shutil.copyfileobj(response, out)
    except (OSError, ValueError) as exc:
        raise ReleaseError("REG004", f"cannot download {listed.filename}: {exc}") from exc
    digest = sha256_file(path)
    if digest != listed.sha256:
        raise ReleaseError(
            "REG005", f"{listed.filename}: sha256 {digest} differs from the index's {listed.sha256}"
        )
    return path


def _members(path: Path) -> dict[str, str]:
    import hashlib  # noqa: PLC0415 - only here
    import zipfile  # noqa: PLC0415

    with zipfile.ZipFile(path) as archive:
        return {name: hashlib.sha256(archive.read(name)).hexdigest() for name in archive.namelist()}


def _build_constraints(work: Path) -> list[str]:
    """``--build-constraints`` with the workspace's pinned build backend, so the sdist builds as released."""
    try:
        with (ROOT / "pyproject.toml").open("rb") as handle:
            pins = tomllib.load(handle)["tool"]["uv"]["build-constraint-dependencies"]
    except (OSError, KeyError, tomllib.TOMLDecodeError):
        return []
    constraints = work / "build-constraints.txt"
    constraints.write_text("\n".join(pins) + "\n", encoding="utf-8")
    return ["--build-constraints", str(constraints)]


def _verify_sdists(listing: Listing, version: str, work: Path) -> None:
    """Last step: each sdist matches the index's sha256 and builds a wheel identical to the released one."""
    work.mkdir(parents=True, exist_ok=True)
    constraints = _build_constraints(work)
    for dist in DISTRIBUTIONS:
        sdist = _fetch(listing.sdists[dist.name], work / "sdists")
        released = _fetch(listing.pure[dist.name], work / "released")
        out = work / "from-sdist" / dist.name
        _run(
            [
                _uv(), "build", str(sdist), "--wheel", "--no-config", "--python", sys.executable,
                *constraints, "--out-dir", str(out),
            ],
            "REG015",
            f"building a wheel from {sdist.name}",
        )  # fmt: skip
        built = sorted(out.glob("*.whl"))
        if len(built) != 1 or built[0].name != released.name:
            names = ", ".join(path.name for path in built) or "nothing"
            raise ReleaseError("REG015", f"{sdist.name} built {names}, expected {released.name}")
        ours, theirs = _members(built[0]), _members(released)
        differing = sorted(name for name in ours.keys() | theirs.keys() if ours.get(name) != theirs.get(name))
        if differing:
            shown = ", ".join(differing[:5]) + (
                f" and {len(differing) - 5} more" if len(differing) > 5 else ""
            )
            raise ReleaseError(
                "REG015", f"the wheel built from {sdist.name} differs from {released.name} in: {shown}"
            )


def _conformance(venv: Path, work: Path) -> None:
    """Step 4: the conformance command of the installed core passes for the installed reference adapter."""
    command = venv / ("Scripts" if os.name == "nt" else "bin") / "ds4-context-conformance"
    if not command.exists():
        raise ReleaseError("REG010", "the installed ds4-context-core has no ds4-context-conformance command")
    output = _run(
        [str(command), CONFORMANCE_TARGET, "--json"],
        "REG010",
        f"conformance of {CONFORMANCE_TARGET}",
        cwd=work,
    )
    try:
        passed = json.loads(output).get("passed") is True
    except (ValueError, AttributeError):
        passed = False
    if not passed:
        raise ReleaseError(
            "REG010", f"conformance of {CONFORMANCE_TARGET} did not report passed: {_tail(output)}"
        )


def registry_check(version: str, index_url: str, work: Path, pythons: Sequence[str] = ()) -> None:
    """Run every step; raises :class:`ReleaseError` at the first failing one.

    ``pythons``: the Pythons to install on (``uv venv --python`` values); empty means this interpreter.
    """
    if not is_release_version(version):
        raise ReleaseError(
            "REG001", f"{version!r} is not an exact release version like 0.1.0 (no ranges, no 'latest')"
        )
    listing = _listed_wheels(index_url, version)
    extra = f", and {len(listing.compiled)} compiled core wheel(s)" if listing.compiled else ""
    _say(f"ok: the index lists one pure wheel with a sha256 for each of the three at {version}{extra}")
    wheels = _download_and_verify(index_url, version, listing, work / "download")
    _say("ok: downloaded wheels match the index's sha256, their names, versions and exact core pins")
    if listing.for_this_interpreter():
        _say(f"ok: pip chose the compiled {wheels[0].path.name} for this platform and Python")
    if listing.compiled:
        _say(f"ok: for other platforms pip gets the pure {listing.pure[DISTRIBUTIONS[0].name].filename}")
    for number, python in enumerate(pythons or (sys.executable,)):
        place = work / f"python-{number}"
        place.mkdir()
        interpreter, found = _make_venv(python, place / "venv")
        label = f"CPython {found[0]}.{found[1]}"
        core, compiled = _core_for(index_url, version, listing, python=found, host=wheels[0], work=place)
        if compiled:
            _say(f"ok: pip chose the compiled {core.path.name} for {label}")
        venv = _install_clean(interpreter, [core, *wheels[1:]], version, place, compiled=compiled)
        _say(f"ok: installed {version} of all three into a clean {label} venv from the downloaded files only")
        kind = "compiled extension module" if compiled else "pure _privacy/_walk.py"
        _say(f"ok: the clean venv imports the privacy hot path from the {kind} ({label})")
        _conformance(venv, place)
        _say(f"ok: conformance passes from the installed {version} wheels ({label})")
    # last: a tampered wheel fails above with its own code before it could differ from its sdist here
    _verify_sdists(listing, version, work / "sdist-check")
    _say("ok: each sdist matches its sha256 and builds a wheel identical to the released one")


def main(argv: Sequence[str] | None = None) -> int:
    """Command line entry point."""
    parser = argparse.ArgumentParser(description="Verify a published release from an index, end to end.")
    parser.add_argument("version", help="the exact version to check, e.g. 0.1.0")
    parser.add_argument(
        "--index-url", default=DEFAULT_INDEX, help=f"simple index URL (default: {DEFAULT_INDEX})"
    )
    parser.add_argument(
        "--python",
        action="append",
        default=[],
        help="install and run conformance on this Python (uv venv --python; repeatable; default: this one)",
    )
    parser.add_argument("--keep", action="store_true", help="keep the work directory for inspection")
    args = parser.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="ds4-registry-check-"))
    try:
        registry_check(args.version, args.index_url, work, args.python)
    except ReleaseError as exc:
        return report([exc], ok="")
    finally:
        if args.keep:
            sys.stderr.write(f"work directory kept: {work}\n")
        else:
            shutil.rmtree(work, ignore_errors=True)
    return report([], ok=f"registry check passed: {args.version} from {args.index_url}")


if __name__ == "__main__":
    raise SystemExit(main())
