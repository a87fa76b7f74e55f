"""Privacy enforcement for provider payloads: classifications, markers, secret redaction, fail closed.

::

    from ds4_context_core.privacy import PrivacyPolicy, enforce_payload_privacy

    result = enforce_payload_privacy(payload, provider="openai", policy=PrivacyPolicy())
    send(result.payload)   # only when no PrivacyEnforcementError was raised

See ``docs/core/privacy.md`` for the marker syntax and the exact rules.
"""

from __future__ import annotations

from ._exports import adopt_public_names
from ._privacy._local_only import mark_local_only_messages
from ._privacy._policy import (
    DEFAULT_LOCAL_PROVIDERS,
    DEFAULT_REMOTE_ALLOWED,
    PRIVACY_CLASSIFICATIONS,
    PRIVACY_CONTENT_KEYS,
    PRIVACY_DESTINATIONS,
    PRIVACY_ERROR_CODES,
    PRIVACY_MAX_DEPTH,
    PRIVACY_PLACEHOLDERS,
    PRIVACY_POLICY_VERSION_PREFIX,
    PRIVACY_STRUCTURAL_KEYS,
    PrivacyCache,
    PrivacyClassification,
    PrivacyDestination,
    PrivacyPolicy,
    PrivacyResult,
    PrivacySummary,
    classify_text,
    enforce_payload_privacy,
    is_classification_allowed,
    privacy_destination,
    privacy_policy_version,
    redact_secrets,
    sanitize_text,
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
    "mark_local_only_messages",
    "privacy_destination",
    "privacy_policy_version",
    "redact_secrets",
    "sanitize_text",
]

adopt_public_names(__name__, globals())
