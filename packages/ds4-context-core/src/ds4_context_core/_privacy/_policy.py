"""Privacy enforcement right before transport: classification markers, secret redaction, fail closed.

Content is classified ``normal < internal < sensitive < local-only``. Authors mark spans inline with
``[ds4:LEVEL]...[/ds4:LEVEL]``; a span is sent to a remote provider only when its level is in the
policy's ``remote_allowed`` set, otherwise it is replaced by a fixed placeholder. Local providers (chosen
by provider id) receive every level. Marker tags never reach any provider.

Marker rules:

* nesting never downgrades: a span's level is the highest level of every marker open around it;
* a string that *starts* with an opening marker that is never closed is classified by it to its end;
* ``\\[ds4:...]`` (a backslash before the bracket) is literal text, kept verbatim with its backslash, so
  sanitizing twice gives the same result;
* any other imbalance (a stray close, a mismatched close, an unclosed marker that is not leading) raises
  the floor of the whole string to the highest level it mentions.

Any exception while sanitizing becomes :class:`PrivacyEnforcementError`; the caller must then not call
its transport. Traversal is one recursive pass over the payload, linear in its size: it builds new
containers (none is shared with the caller's payload) and keeps the caller's own string objects where
nothing changes. Content strings are then screened in one batch, and only the few the screen flags run
the full marker and secret rules. That hot path lives in ``_privacy/_walk.py`` and ``_privacy/_scan.py``
(compiled by mypyc in the compiled wheel, the default on Linux x86_64); this module holds the public API
around it.
"""

from __future__ import annotations

from typing import Any, Final, Literal, TypeAlias

import msgspec

from ds4_context_core._exceptions import PrivacyEnforcementError, PrivacyPolicyError
from ds4_context_core._history._stable_json import stable_hash

from ._cache import PrivacyCache, sanitize_payload_cached
from ._defaults import DEFAULT_LOCAL_PROVIDERS, DEFAULT_REMOTE_ALLOWED, PrivacyClassification
from ._rules import redact_text
from ._walk import (
    _BINARY_PLACEHOLDER,
    _CREDENTIAL_PLACEHOLDER,
    _PRIVATE_KEY_PLACEHOLDER,
    _RANK,
    _SECRET_PLACEHOLDER,
    _TOKEN_PLACEHOLDER,
    PRIVACY_CLASSIFICATIONS,
    PRIVACY_CONTENT_KEYS,
    PRIVACY_MAX_DEPTH,
    PRIVACY_STRUCTURAL_KEYS,
    _segments,
    sanitize_payload,
    sanitize_string,
)

__all__ = [
    "DEFAULT_LOCAL_PROVIDERS",
    "DEFAULT_REMOTE_ALLOWED",
    "PRIVACY_CLASSIFICATIONS",
    "PRIVACY_CONTENT_KEYS",
    "PRIVACY_DESTINATIONS",
    "PRIVACY_ERROR_CODES",
    "PRIVACY_MAX_DEPTH",
    "PRIVACY_PLACEHOLDERS",
    "PRIVACY_POLICY_VERSION_PREFIX",
    "PRIVACY_STRUCTURAL_KEYS",
    "PrivacyCache",
    "PrivacyClassification",
    "PrivacyDestination",
    "PrivacyPolicy",
    "PrivacyResult",
    "PrivacySummary",
    "classify_text",
    "enforce_payload_privacy",
    "is_classification_allowed",
    "privacy_destination",
    "privacy_policy_version",
    "redact_secrets",
    "sanitize_text",
]

PrivacyDestination: TypeAlias = Literal["local", "remote"]

PRIVACY_DESTINATIONS: Final = ("local", "remote")
PRIVACY_ERROR_CODES: Final = (
    "privacy-enforcement-failed",
    "privacy-key-collision",
    "privacy-payload-too-deep",
    "privacy-signed-block",
    "privacy-unsupported-value",
)
PRIVACY_POLICY_VERSION_PREFIX: Final = "ds4-privacy-policy-v1:"

PRIVACY_PLACEHOLDERS: Final = (
    _BINARY_PLACEHOLDER,
    _CREDENTIAL_PLACEHOLDER,
    _PRIVATE_KEY_PLACEHOLDER,
    _SECRET_PLACEHOLDER,
    _TOKEN_PLACEHOLDER,
    *(f"[DS4 {level} content excluded by privacy policy]" for level in PRIVACY_CLASSIFICATIONS),
)


class PrivacyPolicy(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """What may leave the machine. The defaults are the safe ones: on, secrets redacted.

    ``local_providers`` are provider ids (compared case-insensitively) that run on this machine and may
    receive every classification. ``remote_allowed`` lists the classifications any other provider may
    receive; it can never include ``local-only``.
    """

    enabled: bool = True
    local_providers: tuple[str, ...] = DEFAULT_LOCAL_PROVIDERS
    remote_allowed: tuple[PrivacyClassification, ...] = DEFAULT_REMOTE_ALLOWED
    redact_secrets: bool = True

    def __post_init__(self) -> None:
        for level in self.remote_allowed:
            if level not in _RANK:
                raise PrivacyPolicyError(
                    "privacy-classification-unknown", "remote_allowed names an unknown classification"
                )
        if "local-only" in self.remote_allowed:
            raise PrivacyPolicyError(
                "privacy-policy-invalid", "remote_allowed must never include the local-only classification"
            )
        for provider in self.local_providers:
            if not isinstance(provider, str) or not provider.strip():
                raise PrivacyPolicyError("privacy-policy-invalid", "local provider ids must be non-empty")


class PrivacySummary(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """What enforcement did, without the payload: safe to log and to return from ``complete()``."""

    provider: str
    destination: PrivacyDestination
    changed: bool
    blocked_blocks: int
    secret_redactions: int


class PrivacyResult(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """The sanitized payload plus counts. ``payload`` is a new object; the input is never modified."""

    provider: str
    destination: PrivacyDestination
    payload: Any
    changed: bool
    blocked_blocks: int
    secret_redactions: int

    def summary(self) -> PrivacySummary:
        """The metadata-only view of this result."""
        return PrivacySummary(
            provider=self.provider,
            destination=self.destination,
            changed=self.changed,
            blocked_blocks=self.blocked_blocks,
            secret_redactions=self.secret_redactions,
        )


def privacy_destination(provider: str, policy: PrivacyPolicy | None = None) -> PrivacyDestination:
    """``local`` only when the provider id (case-insensitive) is one of the policy's local providers."""
    active = policy or _DEFAULT_POLICY
    lowered = provider.strip().lower()
    return "local" if any(lowered == local.strip().lower() for local in active.local_providers) else "remote"


def is_classification_allowed(
    classification: PrivacyClassification,
    destination: PrivacyDestination,
    policy: PrivacyPolicy | None = None,
) -> bool:
    """Whether content of this classification may go to this destination under ``policy``."""
    if destination == "local":
        return True
    return classification in (policy or _DEFAULT_POLICY).remote_allowed


def privacy_policy_version(policy: PrivacyPolicy | None = None) -> str:
    """A short stable id of a policy's effect, for caches keyed on it (such as local KV eligibility)."""
    active = policy or _DEFAULT_POLICY
    digest = stable_hash(
        {
            "enabled": active.enabled,
            "localProviders": sorted({provider.strip().lower() for provider in active.local_providers}),
            "remoteAllowed": sorted(set(active.remote_allowed), key=_RANK.__getitem__),
            "redactSecrets": active.redact_secrets,
        }
    )
    return PRIVACY_POLICY_VERSION_PREFIX + digest[:16]


def classify_text(text: str) -> PrivacyClassification:
    """The highest classification any part of ``text`` carries (``normal`` when it has no markers)."""
    segments = _segments(text)
    if segments is None:
        return "normal"
    top = max((rank for _span, rank in segments), default=0)
    return PRIVACY_CLASSIFICATIONS[top]


def redact_secrets(text: str) -> tuple[str, int]:
    """Replace private keys, API credentials, bearer tokens and ``password=...`` values; return the count."""
    return redact_text(text)


def _allowed_ranks(destination: PrivacyDestination, policy: PrivacyPolicy) -> frozenset[int] | None:
    """The classification ranks that may go to ``destination`` (None: every rank, for a local one)."""
    return None if destination == "local" else frozenset(_RANK[level] for level in policy.remote_allowed)


def sanitize_text(
    text: str, *, destination: PrivacyDestination, policy: PrivacyPolicy | None = None
) -> tuple[str, int, int]:
    """Sanitize one string for a destination: ``(text, blocked_spans, secret_redactions)``."""
    active = policy or _DEFAULT_POLICY
    return sanitize_string(
        text, _allowed_ranks(destination, active), destination == "remote" and active.redact_secrets
    )


def enforce_payload_privacy(
    payload: Any, *, provider: str, policy: PrivacyPolicy | None = None, cache: PrivacyCache | None = None
) -> PrivacyResult:
    """Sanitize a provider payload for ``provider``; raise :class:`PrivacyEnforcementError` on any failure.

    Strings under content keys (and any string holding a marker) are sanitized; structural keys are kept.
    With the policy disabled the payload is returned as given. The input is never modified. With a
    ``cache``, each message (item of a top-level content list) sanitized before under the same
    destination and policy is taken from it: the result is the same, only faster.
    """
    active = policy or _DEFAULT_POLICY
    try:
        if not isinstance(provider, str) or not provider.strip():
            raise PrivacyEnforcementError("privacy-enforcement-failed", "provider id is missing")
        destination = privacy_destination(provider, active)
        if not active.enabled:
            return PrivacyResult(
                provider=provider,
                destination=destination,
                payload=payload,
                changed=False,
                blocked_blocks=0,
                secret_redactions=0,
            )
        allowed = _allowed_ranks(destination, active)
        redact = destination == "remote" and active.redact_secrets
        if cache is None:
            sanitized, changed, blocked, redactions = sanitize_payload(
                payload, allowed, redact, destination == "local"
            )
        else:
            sanitized, changed, blocked, redactions = sanitize_payload_cached(
                payload, allowed, redact, destination == "local", cache
            )
    except PrivacyEnforcementError:
        raise
    except Exception as error:
        # Never chain the original: its message may quote payload content.
        raise PrivacyEnforcementError(
            "privacy-enforcement-failed", f"privacy enforcement failed ({type(error).__name__[:40]})"
        ) from None
    return PrivacyResult(
        provider=provider,
        destination=destination,
        payload=sanitized,
        changed=changed,
        blocked_blocks=blocked,
        secret_redactions=redactions,
    )


_DEFAULT_POLICY: Final = PrivacyPolicy()
