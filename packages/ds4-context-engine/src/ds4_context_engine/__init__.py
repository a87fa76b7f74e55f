"""ds4-context-engine: Pi-style host integration and the ``ds4-context`` CLI.

The subpackages are the full surface (``pi``, ``store``, ``commands``, ``providers``, ``runtime``); the names
below are the ones most hosts start from. They are imported on first use, so ``import ds4_context_engine``
(and the CLI) does not pay for core, HTTP clients or SQLite until they are needed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._lazy import lazy_exports
from ._version import __version__

if TYPE_CHECKING:
    from ._exceptions import (
        CommandError,
        DerivedStoreError,
        PiSessionError,
        PiSessionWriteError,
        UntrustedPathError,
    )
    from .commands import ContextWorkspace, run_context_command_text
    from .pi import (
        PiSessionAdapter,
        append_pi_entry,
        build_pi_context,
        create_pi_session,
        pi_session_conformance_factory,
        read_pi_session,
    )
    from .providers import ModelReference, parse_model_reference
    from .runtime import ProviderRuntime
    from .store import DerivedStore, SqliteDerivedStore, open_derived_store

__all__ = [
    "CommandError",
    "ContextWorkspace",
    "DerivedStore",
    "DerivedStoreError",
    "ModelReference",
    "PiSessionAdapter",
    "PiSessionError",
    "PiSessionWriteError",
    "ProviderRuntime",
    "SqliteDerivedStore",
    "UntrustedPathError",
    "__version__",
    "append_pi_entry",
    "build_pi_context",
    "create_pi_session",
    "open_derived_store",
    "parse_model_reference",
    "pi_session_conformance_factory",
    "read_pi_session",
    "run_context_command_text",
]

_LAZY_EXPORTS = {
    # the exceptions too: they import core, which ``ds4-context version`` does not need
    "CommandError": "_exceptions",
    "DerivedStoreError": "_exceptions",
    "PiSessionError": "_exceptions",
    "PiSessionWriteError": "_exceptions",
    "UntrustedPathError": "_exceptions",
    "ContextWorkspace": "commands",
    "run_context_command_text": "commands",
    "PiSessionAdapter": "pi",
    "append_pi_entry": "pi",
    "build_pi_context": "pi",
    "create_pi_session": "pi",
    "pi_session_conformance_factory": "pi",
    "read_pi_session": "pi",
    "ModelReference": "providers",
    "parse_model_reference": "providers",
    "ProviderRuntime": "runtime",
    "DerivedStore": "store",
    "SqliteDerivedStore": "store",
    "open_derived_store": "store",
}


__getattr__ = lazy_exports(__name__, _LAZY_EXPORTS, globals())
