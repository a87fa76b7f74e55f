"""Turn locally built compiled wheels into manylinux wheels, only when auditwheel verifies them.

Usage: ``retag_manylinux.py WHEEL... --out-dir DIR [--policy manylinux_2_17_x86_64] [--auditwheel PATH]``.

The mypyc build hook tags a compiled core wheel for the machine that built it
(``cp311-cp311-linux_x86_64``): a local build must not claim more than it knows, and PyPI refuses that
tag. This script is the step that claims more, and only after checking:

1. each wheel must be a CPython platform wheel tagged ``linux_<arch>`` for the policy's architecture,
   whose ``WHEEL`` file names the same tag and whose ``RECORD`` matches every file in it;
2. ``auditwheel show --json`` (the pinned version of the ``dev`` dependency group) audits it: a wheel
   that needs a shared library outside the policy's whitelist, symbol versions of a newer glibc than the
   policy allows, or that auditwheel finds consistent with no manylinux policy at or below the target for
   another reason (an ISA extension, for instance) is refused, naming the wheel and the reason;
3. only when every wheel passes are they written: the same archive with the ``WHEEL`` file's ``Tag:``
   lines naming the policy and its legacy alias (``manylinux_2_17_x86_64`` and
   ``manylinux2014_x86_64``), the ``RECORD`` entry of ``WHEEL`` rehashed, and the file named
   ``...-cp311-cp311-manylinux_2_17_x86_64.manylinux2014_x86_64.whl``. Every other member keeps its bytes,
   order, permissions and timestamp, so the output is a function of the input: a byte-identical build
   gives a byte-identical manylinux wheel. Nothing else is grafted or patched (``auditwheel repair`` is
   not needed: a wheel that would need libraries grafted in is refused instead).

Codes: MNL001 not a local CPython ``linux_<arch>`` wheel (or unreadable, or its ``WHEEL`` tags disagree
with its name), MNL002 auditwheel is missing, failed or gave output this script cannot read, MNL003 the
wheel needs external shared libraries, MNL004 it needs a newer glibc than the policy, MNL005 auditwheel
finds it consistent with no manylinux policy up to the target for another reason, MNL006 its ``RECORD``
does not match its files, MNL007 the policy is not a ``manylinux_2_<minor>_<arch>`` tag.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from _dists import b64_sha256, record_problems
from _release import ReleaseError, report

__all__ = [
    "DEFAULT_POLICY",
    "Audit",
    "Policy",
    "audit_wheel",
    "main",
    "parse_policy",
    "retag_wheel",
    "verdict",
]

DEFAULT_POLICY = "manylinux_2_17_x86_64"
# PEP 600: the legacy names of the first three manylinux policies.
LEGACY_ALIASES = {5: "manylinux1", 12: "manylinux2010", 17: "manylinux2014"}
_POLICY = re.compile(r"manylinux_2_(?P<minor>\d+)_(?P<arch>[a-z0-9_]+)")
_LOCAL_WHEEL = re.compile(
    r"(?P<stem>[^-]+-[^-]+)-(?P<python>cp3\d+)-(?P<abi>cp3\d+)-linux_(?P<arch>[a-z0-9_]+)\.whl"
)
_GLIBC = re.compile(r"GLIBC_2\.(?P<minor>\d+)(?:\.\d+)?")
_AUDIT_SCHEMA = 1  # the "version" of `auditwheel show --json` output this script reads
_TAIL = 300


@dataclass(frozen=True)
class Policy:
    """A PEP 600 manylinux policy: the glibc minor version it allows and its architecture."""

    minor: int
    arch: str

    @property
    def tag(self) -> str:
        """``manylinux_2_<minor>_<arch>``."""
        return f"manylinux_2_{self.minor}_{self.arch}"

    @property
    def platform_tags(self) -> tuple[str, ...]:
        """The platform tags a wheel of this policy carries: the PEP 600 tag, then any legacy alias."""
        legacy = LEGACY_ALIASES.get(self.minor)
        return (self.tag, f"{legacy}_{self.arch}") if legacy else (self.tag,)


def parse_policy(text: str) -> Policy | None:
    """The policy named by a PEP 600 tag, or ``None``."""
    match = _POLICY.fullmatch(text)
    return None if match is None else Policy(int(match["minor"]), match["arch"])


@dataclass(frozen=True)
class Audit:
    """What ``auditwheel show --json`` found in one wheel."""

    overall_tag: str  # the most compatible platform tag the wheel is consistent with
    symbol_tag: str  # the same, judged by versioned symbols alone
    external_libs: dict[str, str | None]  # soname -> path found on this machine
    versioned_symbols: dict[str, list[str]]  # soname -> symbol versions required
    unsupported_isa: bool


def _tail(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    last = lines[-1] if lines else ""
    return last if len(last) <= _TAIL else last[:_TAIL] + "..."


def _dist_info(stem: str) -> str:
    return f"{stem}.dist-info"


def _check_local_wheel(path: Path, policy: Policy) -> re.Match[str]:
    """The file name's parts of a local CPython ``linux_<arch>`` wheel whose WHEEL file agrees."""
    match = _LOCAL_WHEEL.fullmatch(path.name)
    if match is None:
        raise ReleaseError(
            "MNL001",
            f"{path.name}: not a local CPython platform wheel (expected ...-cp3XY-cp3XY-linux_<arch>.whl)",
        )
    if match["python"] != match["abi"]:
        raise ReleaseError("MNL001", f"{path.name}: Python tag {match['python']} but ABI tag {match['abi']}")
    if match["arch"] != policy.arch:
        raise ReleaseError(
            "MNL001", f"{path.name}: built for linux_{match['arch']}, the policy is {policy.tag}"
        )
    try:
        with zipfile.ZipFile(path) as archive:
            wheel_text = archive.read(f"{_dist_info(match['stem'])}/WHEEL").decode("utf-8")
    except (OSError, zipfile.BadZipFile, KeyError, UnicodeDecodeError) as exc:
        raise ReleaseError("MNL001", f"{path.name}: unreadable wheel or no WHEEL file ({exc})") from exc
    lines = wheel_text.splitlines()
    if "Root-Is-Purelib: false" not in lines:
        raise ReleaseError("MNL001", f"{path.name}: its WHEEL file does not say Root-Is-Purelib: false")
    tags = [line.partition(":")[2].strip() for line in lines if line.startswith("Tag:")]
    expected = f"{match['python']}-{match['abi']}-linux_{match['arch']}"
    if tags != [expected]:
        raise ReleaseError(
            "MNL001", f"{path.name}: its WHEEL file lists tags {tags}, expected [{expected!r}]"
        )
    return match


def find_auditwheel() -> str | None:
    """auditwheel beside the running interpreter (the session's venv), else on PATH."""
    beside = Path(sys.executable).parent / ("auditwheel.exe" if os.name == "nt" else "auditwheel")
    return str(beside) if beside.exists() else shutil.which("auditwheel")


def audit_wheel(path: Path, auditwheel: str) -> Audit:
    """``auditwheel show --json`` of one wheel. Raises MNL002 when it fails or prints something unreadable."""
    result = subprocess.run(
        [auditwheel, "show", "--json", str(path)], capture_output=True, text=True, check=False, timeout=300
    )
    if result.returncode != 0:
        reason = _tail(result.stderr) or _tail(result.stdout)
        raise ReleaseError(
            "MNL002", f"{path.name}: auditwheel show failed (exit {result.returncode}): {reason}"
        )
    try:
        data = json.loads(result.stdout)
        if not isinstance(data, dict) or data.get("version") != _AUDIT_SCHEMA:
            raise ValueError(f"not auditwheel's version {_AUDIT_SCHEMA} report")
        external = data["external_libs"]
        symbols = data["versioned_symbols"]
        audit = Audit(
            overall_tag=str(data["overall_tag"]),
            symbol_tag=str(data["sym_tag"]),
            external_libs={str(k): None if v is None else str(v) for k, v in dict(external).items()},
            versioned_symbols={str(k): sorted(map(str, v)) for k, v in dict(symbols).items()},
            unsupported_isa=bool(data["unsupported_isa"]),
        )
    except (ValueError, KeyError, TypeError) as exc:
        raise ReleaseError(
            "MNL002", f"{path.name}: unreadable auditwheel show --json output ({exc})"
        ) from exc
    if data.get("pure") is not False:
        raise ReleaseError("MNL001", f"{path.name}: auditwheel finds no platform-specific binary in it")
    return audit


def verdict(name: str, audit: Audit, policy: Policy) -> list[ReleaseError]:
    """Why the audited wheel may not carry ``policy``'s tag; empty when it may."""
    problems: list[ReleaseError] = []
    if audit.external_libs:
        libraries = ", ".join(sorted(audit.external_libs))
        problems.append(
            ReleaseError(
                "MNL003",
                f"{name}: needs external shared libraries outside the {policy.tag} whitelist: {libraries}",
            )
        )
    newer = sorted(
        {
            f"{library}: {version}"
            for library, versions in audit.versioned_symbols.items()
            for version in versions
            if (match := _GLIBC.fullmatch(version)) and int(match["minor"]) > policy.minor
        }
    )
    symbol_policy = parse_policy(audit.symbol_tag)
    if newer or symbol_policy is None or symbol_policy.minor > policy.minor:
        detail = f" ({', '.join(newer)})" if newer else ""
        if symbol_policy is None:
            reason = f"fit no manylinux policy (auditwheel: {audit.symbol_tag}){detail}"
        else:
            reason = f"need glibc 2.{symbol_policy.minor}{detail}"
        problems.append(
            ReleaseError(
                "MNL004",
                f"{name}: its versioned symbols {reason}, newer than {policy.tag} allows "
                f"(glibc 2.{policy.minor})",
            )
        )
    overall = parse_policy(audit.overall_tag)
    if not problems and (overall is None or overall.arch != policy.arch or overall.minor > policy.minor):
        isa = (
            " (it uses instruction set extensions beyond the architecture's baseline)"
            if audit.unsupported_isa
            else ""
        )
        problems.append(
            ReleaseError(
                "MNL005",
                f"{name}: auditwheel finds it consistent only with {audit.overall_tag}, "
                f"not {policy.tag}{isa}",
            )
        )
    return problems


def retag_wheel(path: Path, out_dir: Path, policy: Policy) -> Path:
    """Write the wheel re-tagged for ``policy`` into ``out_dir``; deterministic, standard library only."""
    match = _check_local_wheel(path, policy)
    python, abi = match["python"], match["abi"]
    dist_info = _dist_info(match["stem"])
    target = out_dir / f"{match['stem']}-{python}-{abi}-{'.'.join(policy.platform_tags)}.whl"
    with zipfile.ZipFile(path) as archive:
        members = [(info, archive.read(info.filename)) for info in archive.infolist()]
    lines = (
        next(data for info, data in members if info.filename == f"{dist_info}/WHEEL").decode().splitlines()
    )
    first_tag = next(index for index, line in enumerate(lines) if line.startswith("Tag:"))
    kept = [line for line in lines if not line.startswith("Tag:")]
    tags = [f"Tag: {python}-{abi}-{platform}" for platform in policy.platform_tags]
    wheel_file = ("\n".join(kept[:first_tag] + tags + kept[first_tag:]) + "\n").encode("utf-8")
    record_lines = (
        next(data for info, data in members if info.filename == f"{dist_info}/RECORD").decode().splitlines()
    )
    prefix = f"{dist_info}/WHEEL,"
    record_lines = [
        f"{prefix}sha256={b64_sha256(wheel_file)},{len(wheel_file)}" if line.startswith(prefix) else line
        for line in record_lines
    ]
    record = ("\n".join(record_lines) + "\n").encode("utf-8")
    replaced = {f"{dist_info}/WHEEL": wheel_file, f"{dist_info}/RECORD": record}
    out_dir.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(target.name + ".partial")
    with zipfile.ZipFile(partial, "w") as output:
        for info, data in members:
            copy = zipfile.ZipInfo(info.filename, date_time=info.date_time)
            copy.compress_type = info.compress_type
            copy.external_attr = info.external_attr
            copy.create_system = info.create_system
            output.writestr(copy, replaced.get(info.filename, data))
    partial.replace(target)
    return target


def check_and_retag(
    wheels: Sequence[Path], out_dir: Path, policy: Policy, auditwheel: str | None
) -> tuple[list[Path], list[ReleaseError]]:
    """Audit every wheel, then retag them all, or none when any is refused."""
    problems: list[ReleaseError] = []
    for path in wheels:
        try:
            _check_local_wheel(path, policy)
        except ReleaseError as exc:
            problems.append(exc)
            continue
        wrong = record_problems(path)
        if wrong:
            shown = "; ".join(wrong[:3]) + (f"; and {len(wrong) - 3} more" if len(wrong) > 3 else "")
            problems.append(ReleaseError("MNL006", f"{path.name}: RECORD does not match the wheel: {shown}"))
            continue
        if auditwheel is None:
            problems.append(
                ReleaseError(
                    "MNL002", "auditwheel is not installed (it is pinned in the dev dependency group)"
                )
            )
            break
        try:
            problems += verdict(path.name, audit_wheel(path, auditwheel), policy)
        except ReleaseError as exc:
            problems.append(exc)
    if problems:
        return [], problems
    return [retag_wheel(path, out_dir, policy) for path in wheels], []


def main(argv: Sequence[str] | None = None) -> int:
    """Command line entry point."""
    parser = argparse.ArgumentParser(description="Retag auditwheel-verified compiled wheels as manylinux.")
    parser.add_argument("wheels", type=Path, nargs="+", help="locally built cp3XY-cp3XY-linux_<arch> wheels")
    parser.add_argument("--out-dir", type=Path, required=True, help="where the manylinux wheels are written")
    parser.add_argument("--policy", default=DEFAULT_POLICY, help=f"target policy (default: {DEFAULT_POLICY})")
    parser.add_argument("--auditwheel", help="the auditwheel command (default: beside python, else PATH)")
    args = parser.parse_args(argv)
    policy = parse_policy(args.policy)
    if policy is None:
        return report(
            [ReleaseError("MNL007", f"{args.policy!r} is not a PEP 600 tag like {DEFAULT_POLICY}")], ok=""
        )
    written, problems = check_and_retag(
        args.wheels, args.out_dir, policy, args.auditwheel or find_auditwheel()
    )
    names = ", ".join(path.name for path in written)
    return report(problems, ok=f"auditwheel verified {policy.tag}; wrote {names}")


if __name__ == "__main__":
    raise SystemExit(main())
