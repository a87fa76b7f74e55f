"""The pydantic models of ``ds4-context-config-v1`` and the reading of a mapping into them.

Public through :mod:`ds4_context_core.config`, which imports this module (and pydantic) only when a
model is first named or a configuration is read; a plan without a configuration never needs it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Final, Literal

import msgspec
from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, ValidationError
from pydantic_core import PydanticCustomError

from ._exceptions import PrivacyPolicyError
from ._privacy._policy import (
    DEFAULT_LOCAL_PROVIDERS,
    DEFAULT_REMOTE_ALLOWED,
    PrivacyClassification,
    PrivacyPolicy,
)
from .config import (
    CONFIG_SCHEMA_ID,
    DEFAULT_EVIDENCE_WORDS,
    DEFAULT_READ_ONLY_TOOLS,
    DEFAULT_WRITE_TOOLS,
    ConfigLoadResult,
    ConfigWarning,
)

__all__ = [
    "BudgetConfig",
    "Ds4ContextConfig",
    "LocalKvConfig",
    "PlannerConfig",
    "PrivacyConfig",
    "PruningConfig",
]

_MAX_WARNINGS: Final = 64
_MAX_PATH_CHARS: Final = 120
_MAX_PROVIDER_IDS: Final = 64
_MAX_PROVIDER_ID_CHARS: Final = 256
_MAX_REMOTE_ALLOWED: Final = 16
_POLICY_DEFAULTS: Final = PrivacyPolicy()  # the switches' defaults, read from the policy itself

# Why a value was rejected, from pydantic's error types; the detail of a warning names the reason only.
_RANGE_ERRORS: Final = frozenset(
    {"greater_than", "greater_than_equal", "less_than", "less_than_equal", "too_long", "too_short"}
)


def _sequence_as_tuple(value: object) -> object:
    """JSON and TOML have lists, not tuples: a list is read as the tuple it spells, nothing else is."""
    return tuple(value) if isinstance(value, list) else value


def _privacy_rules(**fields: Any) -> None:
    """Apply :class:`PrivacyPolicy`'s own checks, so the section and the policy never disagree."""
    try:
        PrivacyPolicy(**fields)
    except PrivacyPolicyError as error:
        raise PydanticCustomError(error.code, "rejected by the privacy policy rules") from None


def _check_local_providers(value: tuple[str, ...]) -> tuple[str, ...]:
    for provider in value:
        if len(provider) > _MAX_PROVIDER_ID_CHARS or not provider.isprintable():
            raise PydanticCustomError("privacy-policy-invalid", "provider ids are 1-256 printable characters")
    _privacy_rules(local_providers=value)
    return value


def _check_remote_allowed(
    value: tuple[PrivacyClassification, ...],
) -> tuple[PrivacyClassification, ...]:
    _privacy_rules(remote_allowed=value)
    return value


_Names = Annotated[tuple[str, ...], BeforeValidator(_sequence_as_tuple)]


class _Section(BaseModel):
    model_config = ConfigDict(
        extra="forbid", frozen=True, validate_default=True, strict=True, allow_inf_nan=False
    )


class BudgetConfig(_Section):
    """How the token budget is derived from a model descriptor (all limits in tokens)."""

    target_fill_ratio: float = Field(
        default=0.7, gt=0.0, le=1.0, description="Fill aimed at after a compaction."
    )
    soft_limit_ratio: float = Field(
        default=0.8, gt=0.0, le=1.0, description="Fill that triggers a compaction."
    )
    hard_limit_ratio: float = Field(default=0.9, gt=0.0, le=1.0, description="Fill a plan may never exceed.")
    output_reserve_ratio: float = Field(
        default=0.25, gt=0.0, le=1.0, description="Share of the window reserved for the answer."
    )
    minimum_output_reserve: int = Field(
        default=1024, ge=0, le=1_000_000, description="Least reserve, within the model's output limit."
    )
    preferred_output_reserve: int = Field(
        default=32768, ge=0, le=1_000_000, description="Most reserve, however large the window."
    )
    safety_margin_ratio: float = Field(default=0.02, ge=0.0, le=0.5)
    safety_margin_min: int = Field(default=1024, ge=0, le=1_000_000)
    safety_margin_max: int = Field(default=8192, ge=0, le=1_000_000)
    calibration_ratio: float = Field(
        default=1.0, gt=0.0, le=100.0, description="actual/estimate; values below 1 never raise the limits."
    )
    calibration_prior: bool = Field(
        default=True,
        description="Without a ratio from usage, assume the provider family's measured one.",
    )
    pin_cap_ratio: float = Field(
        default=0.25, gt=0.0, le=1.0, description="Share of the hard limit pins may use."
    )


class PlannerConfig(_Section):
    """Planner behaviour. ``None`` ceilings follow the adaptive ceilings of the context window."""

    recent_tail_tokens: int | None = Field(default=None, ge=0, le=10_000_000)
    retrieved_history_tokens: int | None = Field(default=None, ge=0, le=10_000_000)
    project_snippet_tokens: int | None = Field(default=None, ge=0, le=10_000_000)
    summary_tokens: int | None = Field(default=None, ge=0, le=10_000_000)
    memory_tokens: int | None = Field(default=None, ge=0, le=10_000_000)
    compaction_batch_ratio: float = Field(
        default=0.2, ge=0.0, le=0.9, description="Least share of the hard limit one compaction frees."
    )
    compaction_low_water_ratio: float = Field(
        default=0.5,
        gt=0.0,
        le=1.0,
        description="Share of the room for history (the hard limit less the fixed overhead and the task "
        "digest) a compaction keeps: the lower, the more steps append before the next one moves the cut.",
    )
    fixed_head_ratio: float = Field(
        default=0.25,
        ge=0.0,
        le=0.5,
        description="Share of the room for history the oldest kept messages may take as a fixed head: "
        "kept byte for byte at every compaction (the cut moves after it) while the task digest is on, so "
        "a compaction keeps the cached prefix up to the digest. 0 moves the cut from the front.",
    )
    task_digest: bool = Field(
        default=True,
        description="Put a digest of the task (requests, files changed, commands, errors) that the cut "
        "left out in front of the history.",
    )


class PruningConfig(_Section):
    """Layer 1 (judged trimming of old tool results) and layer 2 (deterministic receipts)."""

    enabled: bool = True
    receipts: bool = True
    dry_run: bool = Field(default=False, description="Decide and report, but change nothing in the plan.")
    preserve_recent: int = Field(default=4, ge=0, le=10_000)
    never_prune_tools: _Names = ()
    read_only_tools: _Names = DEFAULT_READ_ONLY_TOOLS
    write_tools: _Names = DEFAULT_WRITE_TOOLS
    evidence_words: _Names = DEFAULT_EVIDENCE_WORDS
    min_chars_to_prune: int = Field(default=400, ge=0, le=100_000_000)
    min_gain_chars: int = Field(default=40, ge=0, le=100_000_000)
    head_chars: int = Field(default=600, ge=0, le=1_000_000)
    tail_chars: int = Field(default=200, ge=0, le=1_000_000)
    protect_keep_probability: float = Field(default=0.5, ge=0.0, le=1.0)
    sparse_keep_floor: float = Field(default=0.2, ge=0.0, le=1.0)
    sparse_candidate_count: int = Field(default=4, ge=0, le=10_000)
    receipt_keep_quantile: float = Field(default=0.34, ge=0.0, le=1.0)
    receipt_max_side_effect: float = Field(default=0.2, ge=0.0, le=1.0)
    receipt_max_assistant_chars: int = Field(default=1200, ge=0, le=1_000_000)
    receipt_max_reasoning_chars: int = Field(default=4000, ge=0, le=1_000_000)
    receipt_min_range_chars: int = Field(default=2000, ge=0, le=100_000_000)
    receipt_max_ratio: float = Field(default=0.5, gt=0.0, le=1.0)
    receipt_max_per_pass: int = Field(default=3, ge=0, le=1000)
    receipt_note_chars: int = Field(default=400, ge=0, le=10_000)
    receipt_tools: Literal["all", "read-only"] = Field(
        default="all",
        description="Which tool steps layer 2 may receipt: any completed step (a receipt lists edits, "
        "writes and commands as facts, never to be repeated) or read-only steps only.",
    )
    restore_tool: str | None = Field(
        default=None,
        pattern=r"^[A-Za-z][A-Za-z0-9_-]{0,63}$",
        description="The tool the host offers the model to get an original back (e.g. ds4_restore); "
        "receipts and trim markers name ids only when it is set.",
    )


class PrivacyConfig(_Section):
    """What may leave the machine: the settings of :class:`~ds4_context_core.privacy.PrivacyPolicy`.

    Defaults are the privacy module's (``DEFAULT_LOCAL_PROVIDERS``, ``DEFAULT_REMOTE_ALLOWED``, on, secrets
    redacted). Add the id of your own local server (a vLLM or llama.cpp endpoint) to ``local_providers``
    so it receives every classification. :meth:`to_policy` gives the equivalent policy.
    """

    enabled: bool = Field(
        default=_POLICY_DEFAULTS.enabled, description="Enforce the policy before any provider call."
    )
    local_providers: Annotated[
        tuple[str, ...], BeforeValidator(_sequence_as_tuple), AfterValidator(_check_local_providers)
    ] = Field(
        default=DEFAULT_LOCAL_PROVIDERS,
        max_length=_MAX_PROVIDER_IDS,
        description="Provider ids (case-insensitive) on this machine; they receive every classification.",
    )
    remote_allowed: Annotated[
        tuple[PrivacyClassification, ...],
        BeforeValidator(_sequence_as_tuple),
        AfterValidator(_check_remote_allowed),
    ] = Field(
        default=DEFAULT_REMOTE_ALLOWED,
        max_length=_MAX_REMOTE_ALLOWED,
        description="Classifications any other provider may receive; never local-only.",
    )
    redact_secrets: bool = Field(
        default=_POLICY_DEFAULTS.redact_secrets, description="Replace credentials and keys in payloads."
    )

    def to_policy(self) -> PrivacyPolicy:
        """The :class:`~ds4_context_core.privacy.PrivacyPolicy` these settings describe."""
        return PrivacyPolicy(
            enabled=self.enabled,
            local_providers=self.local_providers,
            remote_allowed=self.remote_allowed,
            redact_secrets=self.redact_secrets,
        )


class LocalKvConfig(_Section):
    """Local KV cache reuse (``local-kv-eligibility-v1``). Off by default; reuse also needs a versioned
    ``local-kv-reuse`` capability and an injected runtime port."""

    enabled: bool = Field(default=False, description="Allow reusing a local runtime's KV cache.")


class Ds4ContextConfig(_Section):
    """The whole configuration. Build it with :func:`load_config` to get warnings instead of errors."""

    budget: BudgetConfig = Field(default_factory=BudgetConfig)
    planner: PlannerConfig = Field(default_factory=PlannerConfig)
    pruning: PruningConfig = Field(default_factory=PruningConfig)
    privacy: PrivacyConfig = Field(default_factory=PrivacyConfig)
    local_kv: LocalKvConfig = Field(default_factory=LocalKvConfig)


def _safe_path(*parts: object) -> str:
    text = ".".join(str(part) for part in parts)
    cleaned = "".join(ch if ch.isprintable() else "?" for ch in text)
    return cleaned[:_MAX_PATH_CHARS]


def _reason(error: ValidationError) -> str:
    """``default used: <reason> (<error types>)`` with the reason ``wrong type``, ``out of range`` or
    ``not allowed``; pydantic's messages are never copied, since they may quote the value."""
    kinds = sorted({str(item["type"]) for item in error.errors()})
    if any(kind.endswith("_type") for kind in kinds):
        reason = "wrong type"
    elif all(kind in _RANGE_ERRORS for kind in kinds):
        reason = "out of range"
    else:
        reason = "not allowed"
    return f"default used: {reason} (" + ", ".join(kinds)[:80] + ")"


def _load_section(
    model: type[_Section], raw: Any, path: str, warnings: list[ConfigWarning]
) -> _Section | None:
    if not isinstance(raw, Mapping):
        warnings.append(ConfigWarning(code="config-section-invalid", path=path, detail="not a mapping"))
        return None
    accepted: dict[str, Any] = {}
    fields = model.model_fields
    for key in sorted(raw, key=str):
        value = raw[key]
        if not isinstance(key, str) or key not in fields:
            warnings.append(
                ConfigWarning(code="config-key-unknown", path=_safe_path(path, key), detail="ignored")
            )
            continue
        annotation = fields[key].annotation
        if isinstance(annotation, type) and issubclass(annotation, _Section):
            nested = _load_section(annotation, value, _safe_path(path, key), warnings)
            if nested is not None:
                accepted[key] = nested
            continue
        try:
            model.model_validate({key: value})
        except ValidationError as error:
            warnings.append(
                ConfigWarning(code="config-value-invalid", path=_safe_path(path, key), detail=_reason(error))
            )
            continue
        accepted[key] = value
    section = model.model_validate(accepted)
    if isinstance(section, BudgetConfig) and not (
        section.target_fill_ratio <= section.soft_limit_ratio <= section.hard_limit_ratio
        and section.safety_margin_min <= section.safety_margin_max
    ):
        warnings.append(
            ConfigWarning(
                code="config-ratios-inconsistent",
                path=path,
                detail="need target <= soft <= hard and margin min <= max; budget defaults used",
            )
        )
        section = BudgetConfig()
    return section


def load_config(data: object = None) -> ConfigLoadResult:
    """Read a configuration mapping (for example parsed JSON or TOML) without ever raising.

    ``data`` may be ``None`` (all defaults), a :class:`Ds4ContextConfig`, or a mapping; anything else
    gives the defaults and a ``config-not-a-mapping`` warning.

    A top-level ``"schema"`` key, when present, must be ``"ds4-context-config-v1"``.
    """
    if data is None:
        return ConfigLoadResult(config=Ds4ContextConfig())
    if isinstance(data, Ds4ContextConfig):
        return ConfigLoadResult(config=data)
    warnings: list[ConfigWarning] = []
    if not isinstance(data, Mapping):
        warnings.append(ConfigWarning(code="config-not-a-mapping", path="", detail="defaults used"))
        return ConfigLoadResult(config=Ds4ContextConfig(), warnings=tuple(warnings))
    body = dict(data)
    if "schema" in body and body.pop("schema") != CONFIG_SCHEMA_ID:
        warnings.append(
            ConfigWarning(code="config-schema-unknown", path="schema", detail="read as " + CONFIG_SCHEMA_ID)
        )
    config = _load_section(Ds4ContextConfig, body, "", warnings)
    if not isinstance(config, Ds4ContextConfig):  # pragma: no cover - the mapping case always yields one
        config = Ds4ContextConfig()
    # Paths of top-level keys start with a dot from the empty root; drop it for readability.
    cleaned = tuple(
        msgspec.structs.replace(item, path=item.path.lstrip(".")) for item in warnings[:_MAX_WARNINGS]
    )
    return ConfigLoadResult(config=config, warnings=cleaned)
