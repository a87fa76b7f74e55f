"""Capability registry v1 and deterministic, per-capability negotiation.

Each registry capability is decided on its own: a missing, duplicated, unversioned or reason-less
declaration disables only that capability, and nothing here can disable canonical history, privacy or
completion fallback. The function never raises for bad declarations or requests; it reports them.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any, Final, Literal, TypeAlias

import msgspec

from ._diagnostics import AdapterDiagnostic, DiagnosticSeverity

__all__ = [
    "CAPABILITY_DIAGNOSTIC_CODES",
    "CAPABILITY_REASON_MAX_CHARS",
    "CAPABILITY_REGISTRY_V1",
    "CAPABILITY_VERSION_PATTERN",
    "RUNTIME_ADAPTER_CONTRACT_VERSION",
    "CapabilityDeclaration",
    "CapabilityNegotiation",
    "CapabilityRequest",
    "CapabilityStatus",
    "RuntimeCapabilityId",
    "negotiate_runtime_capabilities",
]

RUNTIME_ADAPTER_CONTRACT_VERSION: Final = "runtime-adapter-v1"
# Frozen for runtime-adapter-v1: adding or reordering an id is a new registry version.
CAPABILITY_REGISTRY_V1: Final = ("compaction", "provider-continuation", "embeddings", "local-kv-reuse")
CAPABILITY_DIAGNOSTIC_CODES: Final = ("capability-declaration-invalid", "capability-unsupported")
CAPABILITY_VERSION_PATTERN: Final = "^[a-z0-9][a-z0-9._-]{0,63}$"
CAPABILITY_REASON_MAX_CHARS: Final = 240

RuntimeCapabilityId: TypeAlias = Literal[
    "compaction", "provider-continuation", "embeddings", "local-kv-reuse"
]

_VERSION: Final = re.compile(CAPABILITY_VERSION_PATTERN, re.IGNORECASE)
_UNKNOWN_ID_PREFIX_CHARS: Final = 32
_REGISTRY: Final = frozenset(CAPABILITY_REGISTRY_V1)


class CapabilityDeclaration(msgspec.Struct, frozen=True, kw_only=True, rename="camel", omit_defaults=True):
    """What an adapter says about one capability: supported with a version, or unsupported with a reason."""

    id: str
    supported: bool
    version: str | None = None
    reason: str | None = None


class CapabilityRequest(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """A host asking for a capability; ``required`` only raises the severity of a refusal."""

    id: str
    required: bool = False


class CapabilityStatus(msgspec.Struct, frozen=True, kw_only=True, rename="camel", omit_defaults=True):
    """The effective declaration of one registry capability and what negotiation decided."""

    id: str
    supported: bool
    requested: bool
    required: bool
    enabled: bool
    version: str | None = None
    reason: str | None = None


class CapabilityNegotiation(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """Statuses of all registry capabilities (registry order), what is enabled and why the rest is not."""

    contract_version: str
    statuses: tuple[CapabilityStatus, ...]
    enabled: tuple[str, ...]
    disabled: tuple[str, ...]
    diagnostics: tuple[AdapterDiagnostic, ...]

    def is_enabled(self, capability: str) -> bool:
        """Whether ``capability`` was requested and enabled."""
        return capability in self.enabled


def normalize_capability_reason(reason: Any) -> str:
    """Collapse whitespace, drop control characters and cut to ``CAPABILITY_REASON_MAX_CHARS``."""
    if not isinstance(reason, str):
        return ""
    collapsed = " ".join(reason.split())
    if not collapsed.isprintable():
        collapsed = "".join(char for char in collapsed if char.isprintable())
    return collapsed[:CAPABILITY_REASON_MAX_CHARS]


def is_valid_capability_version(version: Any) -> bool:
    """Whether ``version`` matches ``CAPABILITY_VERSION_PATTERN`` (case-insensitive)."""
    return isinstance(version, str) and _VERSION.fullmatch(version) is not None


def _escaped_prefix(text: str) -> str:
    return repr(text[:_UNKNOWN_ID_PREFIX_CHARS])


def _effective(declarations: list[Any]) -> tuple[CapabilityDeclaration | None, str | None]:
    """The usable declaration, or None with a fixed reason why it is malformed."""
    if not declarations:
        return None, "no declaration"
    if len(declarations) > 1:
        return None, "duplicate declarations"
    declaration = declarations[0]
    if not isinstance(declaration, CapabilityDeclaration) or not isinstance(declaration.supported, bool):
        return None, "malformed declaration"
    if declaration.supported:
        if not is_valid_capability_version(declaration.version):
            return None, "supported without a valid version"
        return CapabilityDeclaration(id=declaration.id, supported=True, version=declaration.version), None
    reason = normalize_capability_reason(declaration.reason)
    if not reason:
        return None, "unsupported without a reason"
    return CapabilityDeclaration(id=declaration.id, supported=False, reason=reason), None


def negotiate_runtime_capabilities(
    declarations: Iterable[CapabilityDeclaration], requests: Iterable[CapabilityRequest] = ()
) -> CapabilityNegotiation:
    """Decide every registry capability independently from the adapter's declarations and the requests.

    A requested capability is enabled only when its single declaration is supported with a valid
    version. Duplicate requests merge (``required`` is OR-ed). A malformed declaration yields a
    ``capability-declaration-invalid`` diagnostic; a refused request a ``capability-unsupported`` one.
    Severity is ``warning`` for required requests and ``info`` otherwise.
    """
    by_id: dict[str, list[Any]] = {}
    for declared in declarations:
        key = getattr(declared, "id", None)
        by_id.setdefault(key if isinstance(key, str) else "", []).append(declared)

    wanted: dict[str, bool] = {}
    for request in requests:
        key = getattr(request, "id", None)
        if not isinstance(key, str):
            continue
        wanted[key] = wanted.get(key, False) or getattr(request, "required", False) is True

    statuses: list[CapabilityStatus] = []
    enabled: list[str] = []
    disabled: list[str] = []
    diagnostics: list[AdapterDiagnostic] = []
    for capability in CAPABILITY_REGISTRY_V1:
        requested = capability in wanted
        required = wanted.get(capability, False)
        severity: DiagnosticSeverity = "warning" if required else "info"
        declaration, problem = _effective(by_id.get(capability, []))
        if declaration is None:
            diagnostics.append(
                AdapterDiagnostic(
                    code="capability-declaration-invalid",
                    severity=severity,
                    message=f"capability declaration is malformed: {problem}",
                    capability=capability,
                )
            )
            status = CapabilityStatus(
                id=capability,
                supported=False,
                reason=f"malformed capability declaration: {problem}",
                requested=requested,
                required=required,
                enabled=False,
            )
        else:
            status = CapabilityStatus(
                id=capability,
                supported=declaration.supported,
                version=declaration.version,
                reason=declaration.reason,
                requested=requested,
                required=required,
                enabled=requested and declaration.supported,
            )
            if requested and not declaration.supported:
                diagnostics.append(
                    AdapterDiagnostic(
                        code="capability-unsupported",
                        severity=severity,
                        message="requested capability is not supported by this adapter",
                        capability=capability,
                    )
                )
        statuses.append(status)
        if status.enabled:
            enabled.append(capability)
        elif requested:
            disabled.append(capability)

    for unknown in sorted(key for key in wanted if key not in _REGISTRY):
        disabled.append(unknown[:_UNKNOWN_ID_PREFIX_CHARS])
        diagnostics.append(
            AdapterDiagnostic(
                code="capability-unsupported",
                severity="warning" if wanted[unknown] else "info",
                message=f"capability {_escaped_prefix(unknown)} is not in registry v1",
            )
        )
    return CapabilityNegotiation(
        contract_version=RUNTIME_ADAPTER_CONTRACT_VERSION,
        statuses=tuple(statuses),
        enabled=tuple(enabled),
        disabled=tuple(disabled),
        diagnostics=tuple(diagnostics),
    )
