"""Read built wheels and sdists without installing them (standard library only)."""

from __future__ import annotations

import base64
import csv
import email.parser
import hashlib
import io
import re
import tarfile
import zipfile
from dataclasses import dataclass
from email.message import Message
from pathlib import Path

from _release import DISTRIBUTIONS, Distribution, ReleaseError, normalize_name, parse_requirement

__all__ = [
    "WheelFile",
    "b64_sha256",
    "read_sdist_member",
    "read_sdist_names",
    "read_wheel",
    "record_problems",
    "sha256_file",
    "sibling_pin_problems",
    "third_party_requirements",
    "wheel_for",
]

_WHEEL_NAME = re.compile(
    r"(?P<name>[^-]+)-(?P<version>[^-]+)(?:-(?P<build>\d[^-]*))?-(?P<python>[^-]+)-(?P<abi>[^-]+)-(?P<platform>[^-]+)\.whl"
)


@dataclass(frozen=True)
class WheelFile:
    """A wheel's file name parts, archive member names and core metadata."""

    path: Path
    name: str  # normalized distribution name from the file name
    version: str
    tags: str  # "python-abi-platform"
    members: tuple[str, ...]
    metadata: Message

    def requires_dist(self) -> list[str]:
        """The ``Requires-Dist`` values, as written."""
        return [str(value) for value in self.metadata.get_all("Requires-Dist", [])]


def sha256_file(path: Path) -> str:
    """Hex sha256 of a file."""
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 16), b""):
            digest.update(chunk)
    return digest.hexdigest()


def b64_sha256(data: bytes) -> str:
    """The urlsafe, unpadded base64 sha256 that a wheel's RECORD carries."""
    return base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode("ascii")


def record_problems(path: Path) -> list[str]:
    """Every file of the wheel whose RECORD entry is missing or wrong (hash or size), and stale entries."""
    problems: list[str] = []
    with zipfile.ZipFile(path) as archive:
        names = [name for name in archive.namelist() if not name.endswith("/")]
        records = [name for name in names if name.endswith(".dist-info/RECORD")]
        if len(records) != 1:
            return [f"{len(records)} RECORD files"]
        rows = list(csv.reader(io.StringIO(archive.read(records[0]).decode("utf-8"))))
        listed: dict[str, tuple[str, str]] = {}
        for row in rows:
            if not row:
                continue
            if len(row) != 3:
                problems.append(f"malformed RECORD row {row!r}")
                continue
            listed[row[0]] = (row[1], row[2])
        for name in names:
            if name == records[0]:
                continue
            if name not in listed:
                problems.append(f"{name} is not in RECORD")
                continue
            data = archive.read(name)
            digest, size = listed[name]
            if digest != f"sha256={b64_sha256(data)}" or size != str(len(data)):
                problems.append(f"{name} does not match its RECORD entry")
        problems += [
            f"RECORD lists {name}, which is not in the wheel" for name in sorted(set(listed) - set(names))
        ]
    return problems


def read_wheel(path: Path) -> WheelFile:
    """Parse a wheel's file name and read its METADATA. Raises WHL002 when it is not a readable wheel."""
    match = _WHEEL_NAME.fullmatch(path.name)
    if match is None:
        raise ReleaseError("WHL002", f"{path.name}: not a wheel file name")
    try:
        with zipfile.ZipFile(path) as archive:
            members = tuple(archive.namelist())
            stem = f"{match['name']}-{match['version']}.dist-info/METADATA"
            metadata_text = archive.read(stem).decode("utf-8")
    except (OSError, zipfile.BadZipFile, KeyError) as exc:
        raise ReleaseError("WHL002", f"{path.name}: unreadable wheel or no METADATA ({exc})") from exc
    return WheelFile(
        path=path,
        name=normalize_name(match["name"]),
        version=match["version"],
        tags=f"{match['python']}-{match['abi']}-{match['platform']}",
        members=members,
        metadata=email.parser.Parser().parsestr(metadata_text, headersonly=True),
    )


def wheel_for(wheels: list[WheelFile], dist: Distribution) -> WheelFile | None:
    """The wheel of one distribution among ``wheels``."""
    return next((w for w in wheels if w.name == dist.name), None)


def sibling_pin_problems(wheel: WheelFile, version: str, code: str) -> list[ReleaseError]:
    """Every sibling ``Requires-Dist`` of ``wheel`` not pinned ``==version``; core requires no sibling."""
    problems: list[ReleaseError] = []
    unconditional_core_pin = False
    for text in wheel.requires_dist():
        try:
            requirement = parse_requirement(text)
        except ValueError:
            problems.append(ReleaseError(code, f"{wheel.path.name}: unparsable Requires-Dist {text!r}"))
            continue
        if not requirement.is_sibling:
            continue
        if wheel.name == DISTRIBUTIONS[0].name or requirement.name != DISTRIBUTIONS[0].name:
            problems.append(
                ReleaseError(code, f"{wheel.path.name}: must not depend on {requirement.name} ({text!r})")
            )
            continue
        pin = requirement.exact_pin()
        if pin != version:
            problems.append(
                ReleaseError(
                    code,
                    f"{wheel.path.name}: Requires-Dist {text!r} must pin "
                    f"{requirement.name}=={version} exactly",
                )
            )
        elif not requirement.marker:
            unconditional_core_pin = True
    if wheel.name != DISTRIBUTIONS[0].name and not unconditional_core_pin and not problems:
        problems.append(
            ReleaseError(code, f"{wheel.path.name}: no Requires-Dist {DISTRIBUTIONS[0].name}=={version}")
        )
    return problems


def third_party_requirements(wheels: list[WheelFile]) -> list[str]:
    """The non-sibling, non-extra ``Requires-Dist`` of ``wheels``: what must come from a normal index."""
    found: set[str] = set()
    for wheel in wheels:
        for text in wheel.requires_dist():
            requirement = parse_requirement(text)
            if requirement.is_sibling or "extra" in requirement.marker:
                continue
            found.add(text)
    return sorted(found)


def read_sdist_names(path: Path) -> list[str]:
    """Member names of an sdist (``.tar.gz``). Raises WHL008 when unreadable."""
    try:
        with tarfile.open(path, "r:gz") as archive:
            return archive.getnames()
    except (OSError, tarfile.TarError) as exc:
        raise ReleaseError("WHL008", f"{path.name}: unreadable sdist ({exc})") from exc


def read_sdist_member(path: Path, name: str) -> str | None:
    """One text member of an sdist, or ``None``."""
    with tarfile.open(path, "r:gz") as archive:
        try:
            handle = archive.extractfile(name)
        except KeyError:
            return None
        return None if handle is None else handle.read().decode("utf-8")
