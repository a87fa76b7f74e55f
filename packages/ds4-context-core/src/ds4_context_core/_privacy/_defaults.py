"""The privacy policy's default values, apart from the rules that enforce it.

A plan made without a configuration reads these defaults (``_config_defaults``) and never sanitizes
anything; importing :mod:`._policy` would compile every secret-detection pattern first (10-15 ms of
every ``ds4-context plan``). :mod:`._policy` re-exports them under their public names.
"""

from __future__ import annotations

from typing import Final, Literal, TypeAlias

PrivacyClassification: TypeAlias = Literal["normal", "internal", "sensitive", "local-only"]

DEFAULT_LOCAL_PROVIDERS: Final = ("ollama", "llama-cpp", "lmstudio")
DEFAULT_REMOTE_ALLOWED: Final = ("normal", "internal")
