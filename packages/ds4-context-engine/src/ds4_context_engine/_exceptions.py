"""Every exception the engine raises on purpose, in one place.

Each class carries a stable kebab-case ``code`` and subclasses ``ds4_context_core.Ds4ContextError`` (the
root every ds4-context distribution raises under) plus the builtin that fits, so ``except ValueError`` or
``except PermissionError`` keep working. Messages name files and codes, never payloads, prompts, API keys
or response bodies. Users import each class from the public module named on its right (relative to
``ds4_context_engine``; ``.`` is the package itself), which is also the class's ``__module__``::

    Ds4ContextError (ds4_context_core)
    ├── PiSessionError(HistoryError -> ValueError)    a Pi session file that cannot be used    .
    ├── PiSessionWriteError(OSError)                  an append or create that was refused     .
    ├── UntrustedPathError(PermissionError)           a path outside the trusted roots         .
    ├── DerivedStoreError(RuntimeError)               the derived store could not do it        .
    ├── CommandError(ValueError)                      a /context command with bad arguments    .
    ├── ModelReferenceError(ValueError)               a malformed provider:model reference     .providers
    ├── LocalProviderError(ValueError)                a local provider definition refused      .providers
    ├── ProviderConfigurationError(ValueError)        a transport configured with bad values   .providers
    ├── ProviderResponseError(ValueError)             a 2xx answer of the wrong shape          .providers
    ├── ProviderTransportError(RuntimeError)          the adapter-boundary transport failure   .providers
    ├── SandboxPolicyError(ValueError)                a sandbox policy, path or URL refused    .runtime
    ├── SandboxUnavailableError(RuntimeError)         a needed sandbox engine is missing       .runtime
    ├── McpConfigError(ValueError)                    an unusable MCP configuration            .runtime
    ├── RuntimeOptionsError(ValueError)               fallback, retry or override rules broken .runtime
    ├── ToolLifecycleError(RuntimeError)              a malformed or conflicting tool event    .runtime
    ├── DroppedMcpEntryError                          one MCP entry dropped (caught inside parse_mcp_servers)
    ├── BodyTooLargeError(ValueError)                 internal: an answer past the size cap
    ├── ConfigFileError(ValueError)                   internal: a --config file the CLI refused
    ├── CliRunError(RuntimeError)                     internal: run/chat found no model to use
    ├── RunStoppedError                               internal: the run loop ends a turn with a code
    ├── UndecodableBodyError(ValueError)              internal: an answer that does not decode
    ├── StreamFailureError                            internal: an error event inside a stream
    └── StreamCallbackError                           internal: the caller's on_event raised
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ds4_context_core import Ds4ContextError, HistoryError

if TYPE_CHECKING:
    from ds4_context_core.adapter import CompletionFailure

__all__ = [
    "CommandError",
    "DerivedStoreError",
    "LocalProviderError",
    "McpConfigError",
    "ModelReferenceError",
    "PiSessionError",
    "PiSessionWriteError",
    "ProviderConfigurationError",
    "ProviderResponseError",
    "ProviderTransportError",
    "RuntimeOptionsError",
    "SandboxPolicyError",
    "SandboxUnavailableError",
    "ToolLifecycleError",
    "UntrustedPathError",
]

_ENGINE = "ds4_context_engine"
_PROVIDERS = "ds4_context_engine.providers"
_RUNTIME = "ds4_context_engine.runtime"


# --- Pi sessions, trusted paths, the derived store, /context commands (ds4_context_engine) ---


class PiSessionError(HistoryError):
    """A Pi session file could not be read (missing header, unsupported version, too large)."""


class PiSessionWriteError(Ds4ContextError, OSError):
    """Creating or appending to a Pi session was refused; the file was left as it was."""


class UntrustedPathError(Ds4ContextError, PermissionError):
    """A path (or the cwd a session names) resolves outside every trusted root."""


class DerivedStoreError(Ds4ContextError, RuntimeError):
    """The derived store failed in a way a rebuild could not hide."""


class CommandError(Ds4ContextError, ValueError):
    """A /context command was called with an unknown name or invalid arguments."""


# --- the provider layer (ds4_context_engine.providers) ---


class ModelReferenceError(Ds4ContextError, ValueError):
    """A ``<provider>:<model>`` reference was malformed; ``code`` says which rule it broke."""


class LocalProviderError(Ds4ContextError, ValueError):
    """A local provider definition or base URL was refused."""


class ProviderConfigurationError(Ds4ContextError, ValueError):
    """A transport was configured with values it cannot use (bad URL, bad timeout, missing key)."""


class ProviderResponseError(Ds4ContextError, ValueError):
    """A provider answered 2xx with something that is not the documented response shape."""


class ProviderTransportError(Ds4ContextError, RuntimeError):
    """Raised only by the adapter-boundary callable of :meth:`HttpTransport.payload_transport`.

    ``failure`` is the metadata-only :class:`~ds4_context_core.adapter.CompletionFailure`; the adapter
    turns the exception into its retryable ``transport-failed`` fallback.
    """

    def __init__(self, failure: CompletionFailure) -> None:
        super().__init__("provider-transport-failed", f"{failure.kind}: {failure.reason}")
        self.failure = failure


# --- the runtime facade (ds4_context_engine.runtime) ---


class SandboxPolicyError(Ds4ContextError, ValueError):
    """A sandbox policy, or a path or URL checked against one, was refused."""


class SandboxUnavailableError(Ds4ContextError, RuntimeError):
    """The policy needs a sandbox engine that is missing, and the policy fails closed."""


class McpConfigError(Ds4ContextError, ValueError):
    """An MCP configuration as a whole was unusable (single bad entries are dropped, not raised)."""


class RuntimeOptionsError(Ds4ContextError, ValueError):
    """Fallback chains, retry policies or per-attempt overrides that break a rule."""


class ToolLifecycleError(Ds4ContextError, RuntimeError):
    """A tool lifecycle event was malformed, out of order, or conflicts with what is already persisted."""


class DroppedMcpEntryError(Ds4ContextError):
    """Internal: one MCP server entry is unusable; ``parse_mcp_servers`` records it as dropped and goes on.

    It never leaves the engine, so it has no public module.
    """

    def __init__(self, code: str, reason: str) -> None:
        super().__init__(code, reason)
        self.reason = reason


# Report the module users import from (as httpx does), so tracebacks and reprs name a public path.
PUBLIC_MODULES: dict[str, tuple[type[Ds4ContextError], ...]] = {
    _ENGINE: (CommandError, DerivedStoreError, PiSessionError, PiSessionWriteError, UntrustedPathError),
    _PROVIDERS: (
        LocalProviderError,
        ModelReferenceError,
        ProviderConfigurationError,
        ProviderResponseError,
        ProviderTransportError,
    ),
    _RUNTIME: (
        McpConfigError,
        RuntimeOptionsError,
        SandboxPolicyError,
        SandboxUnavailableError,
        ToolLifecycleError,
    ),
}
for _module, _classes in PUBLIC_MODULES.items():
    for _class in _classes:
        _class.__module__ = _module


class BodyTooLargeError(Ds4ContextError, ValueError):
    """Internal: the decoded body passed the cap; reading stopped there (becomes a failure result)."""

    def __init__(self) -> None:
        super().__init__("provider-response-too-large", "the answer passed the size cap")


class UndecodableBodyError(Ds4ContextError, ValueError):
    """Internal: the Content-Encoding is not one we offered, or the bytes do not decode under it."""

    def __init__(self) -> None:
        super().__init__("provider-response-undecodable", "the answer's content encoding does not decode")


class StreamFailureError(Ds4ContextError):
    """Internal: the provider reported an error inside the stream (for example ``overloaded_error``)."""

    def __init__(self, failure: CompletionFailure) -> None:
        super().__init__("provider-stream-error", failure.reason)
        self.failure = failure


class StreamCallbackError(Ds4ContextError):
    """Internal: the caller's ``on_event`` raised; the call ends without retry."""

    def __init__(self) -> None:
        super().__init__("provider-stream-callback-failed", "the event callback raised")


class ConfigFileError(Ds4ContextError, ValueError):
    """Internal: a ``--config`` file the CLI cannot use (printed as ``error [code]: ...``, never quoted)."""


class CliRunError(Ds4ContextError, RuntimeError):
    """Internal: ``run``/``chat`` cannot start: no model to use (``run-no-model``) or a bad ``--model``."""


class RunStoppedError(Ds4ContextError):
    """Internal: the run loop ends a turn with a code; caught inside it and returned as the result."""

    def __init__(self, code: str, detail: str) -> None:
        super().__init__(code, detail)
        self.detail = detail
