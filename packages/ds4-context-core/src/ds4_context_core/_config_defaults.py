"""The default configuration as plain frozen structs, for a plan made without a configuration.

``plan_context(..., config=None)`` reads the defaults of ``ds4-context-config-v1`` on every call, and the
planner used to build them by validating an empty :class:`~ds4_context_core.config.Ds4ContextConfig`: that
imported pydantic and built its models, 70-120 ms of a command-line plan that never reads a config file.
:data:`DEFAULT_CONFIG` holds the same values with the same attribute names (``DEFAULT_CONFIG.budget
.hard_limit_ratio``) without pydantic. It is internal: hosts that ask for the defaults still get the
pydantic model from ``load_config()``. A test compares every field with the validated model, so the two
cannot drift; a default changed in :mod:`ds4_context_core._config_models` must be changed here too.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final, Literal

import msgspec

from ._privacy._defaults import DEFAULT_LOCAL_PROVIDERS, DEFAULT_REMOTE_ALLOWED, PrivacyClassification
from .config import DEFAULT_EVIDENCE_WORDS, DEFAULT_READ_ONLY_TOOLS, DEFAULT_WRITE_TOOLS, ConfigLoadResult

if TYPE_CHECKING:
    from ._privacy._policy import PrivacyPolicy

__all__ = [
    "DEFAULT_CONFIG",
    "DEFAULT_CONFIG_RESULT",
    "DefaultBudget",
    "DefaultConfig",
    "DefaultLocalKv",
    "DefaultPlanner",
    "DefaultPrivacy",
    "DefaultPruning",
]


class DefaultBudget(msgspec.Struct, frozen=True, kw_only=True):
    target_fill_ratio: float = 0.7
    soft_limit_ratio: float = 0.8
    hard_limit_ratio: float = 0.9
    output_reserve_ratio: float = 0.25
    minimum_output_reserve: int = 1024
    preferred_output_reserve: int = 32768
    safety_margin_ratio: float = 0.02
    safety_margin_min: int = 1024
    safety_margin_max: int = 8192
    calibration_ratio: float = 1.0
    calibration_prior: bool = True
    pin_cap_ratio: float = 0.25


class DefaultPlanner(msgspec.Struct, frozen=True, kw_only=True):
    recent_tail_tokens: int | None = None
    retrieved_history_tokens: int | None = None
    project_snippet_tokens: int | None = None
    summary_tokens: int | None = None
    memory_tokens: int | None = None
    compaction_batch_ratio: float = 0.2
    compaction_low_water_ratio: float = 0.5
    fixed_head_ratio: float = 0.25
    task_digest: bool = True


class DefaultPruning(msgspec.Struct, frozen=True, kw_only=True):
    enabled: bool = True
    receipts: bool = True
    dry_run: bool = False
    preserve_recent: int = 4
    never_prune_tools: tuple[str, ...] = ()
    read_only_tools: tuple[str, ...] = DEFAULT_READ_ONLY_TOOLS
    write_tools: tuple[str, ...] = DEFAULT_WRITE_TOOLS
    evidence_words: tuple[str, ...] = DEFAULT_EVIDENCE_WORDS
    min_chars_to_prune: int = 400
    min_gain_chars: int = 40
    head_chars: int = 600
    tail_chars: int = 200
    protect_keep_probability: float = 0.5
    sparse_keep_floor: float = 0.2
    sparse_candidate_count: int = 4
    receipt_keep_quantile: float = 0.34
    receipt_max_side_effect: float = 0.2
    receipt_max_assistant_chars: int = 1200
    receipt_max_reasoning_chars: int = 4000
    receipt_min_range_chars: int = 2000
    receipt_max_ratio: float = 0.5
    receipt_max_per_pass: int = 3
    receipt_note_chars: int = 400
    receipt_tools: Literal["all", "read-only"] = "all"
    restore_tool: str | None = None


class DefaultPrivacy(msgspec.Struct, frozen=True, kw_only=True):
    # PrivacyPolicy's own defaults (the comparison test covers them); the policy module is imported only
    # by to_policy: it compiles the secret rules, which a plan never runs
    enabled: bool = True
    local_providers: tuple[str, ...] = DEFAULT_LOCAL_PROVIDERS
    remote_allowed: tuple[PrivacyClassification, ...] = DEFAULT_REMOTE_ALLOWED
    redact_secrets: bool = True

    def to_policy(self) -> PrivacyPolicy:
        """The policy these settings describe, as ``PrivacyConfig.to_policy`` gives it."""
        from ._privacy._policy import PrivacyPolicy  # noqa: PLC0415 - see the fields

        return PrivacyPolicy(
            enabled=self.enabled,
            local_providers=self.local_providers,
            remote_allowed=self.remote_allowed,
            redact_secrets=self.redact_secrets,
        )


class DefaultLocalKv(msgspec.Struct, frozen=True, kw_only=True):
    enabled: bool = False


class DefaultConfig(msgspec.Struct, frozen=True, kw_only=True):
    """``Ds4ContextConfig()`` without pydantic: the same sections, fields and values."""

    budget: DefaultBudget = DefaultBudget()
    planner: DefaultPlanner = DefaultPlanner()
    pruning: DefaultPruning = DefaultPruning()
    privacy: DefaultPrivacy = DefaultPrivacy()
    local_kv: DefaultLocalKv = DefaultLocalKv()


DEFAULT_CONFIG: Final = DefaultConfig()
DEFAULT_CONFIG_RESULT: Final = ConfigLoadResult(config=DEFAULT_CONFIG)
"""What ``load_config(None)`` gives, with :data:`DEFAULT_CONFIG` in place of the pydantic model."""
