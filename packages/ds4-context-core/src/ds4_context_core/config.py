"""User-facing configuration (``ds4-context-config-v1``): one pydantic model, defaults in one place.

``load_config(mapping)`` never raises for bad content: an unknown key, a value of the wrong type or out
of range, or an inconsistent combination is reported as a :class:`ConfigWarning` and the default is
used instead, so a typo in a host's settings file never breaks a turn. Warnings name the key path and
never echo the rejected value.

Values are read strictly (pydantic strict mode, no NaN or infinity): an integer field takes an integer
only (not ``True``, ``"600"`` or ``600.0``), a number field an integer or a float (not a bool or a
string), a switch ``true``/``false`` only, and a list field a list or tuple of strings. Nothing is ever
coerced: a value of another type is reported and the field keeps its default.

The ``privacy`` section takes its defaults from :mod:`ds4_context_core.privacy` and is checked with the
rules of :class:`~ds4_context_core.privacy.PrivacyPolicy`; since each rejected field keeps its default, an
invalid privacy section never allows more than the default policy does.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

import msgspec

from ._exports import adopt_public_names

if TYPE_CHECKING:
    from ._config_models import (
        BudgetConfig,
        Ds4ContextConfig,
        LocalKvConfig,
        PlannerConfig,
        PrivacyConfig,
        PruningConfig,
    )

__all__ = [
    "CONFIG_SCHEMA_ID",
    "CONFIG_WARNING_CODES",
    "DEFAULT_EVIDENCE_WORDS",
    "DEFAULT_READ_ONLY_TOOLS",
    "DEFAULT_WRITE_TOOLS",
    "BudgetConfig",
    "ConfigLoadResult",
    "ConfigWarning",
    "Ds4ContextConfig",
    "LocalKvConfig",
    "PlannerConfig",
    "PrivacyConfig",
    "PruningConfig",
    "load_config",
]

CONFIG_SCHEMA_ID: Final = "ds4-context-config-v1"

CONFIG_WARNING_CODES: Final = (
    "config-key-unknown",
    "config-not-a-mapping",
    "config-ratios-inconsistent",
    "config-schema-unknown",
    "config-section-invalid",
    "config-value-invalid",
)

# Tool names are compared after normalisation: lower case, with "_" and "-" removed.
DEFAULT_READ_ONLY_TOOLS: Final = (
    "cat",
    "fetch",
    "find",
    "glob",
    "grep",
    "list",
    "ls",
    "read",
    "readfile",
    "search",
    "stat",
    "tree",
    "view",
    "webfetch",
    "websearch",
)

DEFAULT_WRITE_TOOLS: Final = (
    "applypatch",
    "create",
    "edit",
    "multiedit",
    "notebookedit",
    "strreplacebasededittool",
    "strreplaceeditor",
    "write",
    "writefile",
)

DEFAULT_EVIDENCE_WORDS: Final = (
    "assertion",
    "bug",
    "error",
    "exception",
    "fail:",
    "failed",
    "fixme",
    "mismatch",
    "panic",
    "stack trace",
    "todo",
    "traceback",
    "unexpected",
)


class ConfigWarning(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """One rejected part of a configuration. ``path`` is a dotted key path; no value is ever echoed."""

    code: str
    path: str
    detail: str


class ConfigLoadResult(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """A usable configuration plus everything that was rejected while reading it."""

    config: Any  # Ds4ContextConfig; pydantic models are not msgspec types
    warnings: tuple[ConfigWarning, ...] = ()

    @property
    def ok(self) -> bool:
        return not self.warnings


def load_config(data: object = None) -> ConfigLoadResult:
    """Read a configuration mapping (for example parsed JSON or TOML) without ever raising.

    ``data`` may be ``None`` (all defaults), a :class:`Ds4ContextConfig`, or a mapping; anything else
    gives the defaults and a ``config-not-a-mapping`` warning.

    A top-level ``"schema"`` key, when present, must be ``"ds4-context-config-v1"``.
    """
    from ._config_models import load_config as load  # noqa: PLC0415 - pydantic, when a config is read

    return load(data)


# The models are pydantic's: imported when one is first named, so that importing this module (for
# ``load_config``, the codes and the defaults) and planning without a configuration stay free of pydantic.
_MODELS: Final = frozenset(
    {"BudgetConfig", "Ds4ContextConfig", "LocalKvConfig", "PlannerConfig", "PrivacyConfig", "PruningConfig"}
)


def __getattr__(name: str) -> Any:
    if name not in _MODELS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from . import _config_models  # noqa: PLC0415 - see above

    value = getattr(_config_models, name)
    globals()[name] = value
    return value


adopt_public_names(__name__, globals())
