"""``/context adapter`` and ``/context privacy``: the runtime-adapter view of the session."""

from __future__ import annotations

from typing import Any, Final

from ds4_context_core.adapter import (
    CAPABILITY_REGISTRY_V1,
    CapabilityRequest,
    CompletionRequest,
    completion_payload,
)
from ds4_context_core.privacy import privacy_policy_version
from ds4_context_engine._exceptions import CommandError
from ds4_context_engine.pi import PiSessionAdapter

from ._results import AdapterResult, CapabilityLine, PrivacyResult
from ._workspace import ContextWorkspace

__all__ = ["context_adapter", "context_privacy"]

_NO_PROVIDER: Final = "unknown"


async def _never_called(request: CompletionRequest) -> Any:
    raise RuntimeError("the /context adapter command never sends completions")


def workspace_adapter(workspace: ContextWorkspace) -> PiSessionAdapter:
    """A Pi adapter over the workspace's session, trusting the workspace's roots."""
    return PiSessionAdapter(
        workspace.session_path,
        trusted_roots=workspace.trusted_roots,
        transport=_never_called,
        model=workspace.model,
        leaf_id=workspace.leaf_id,
        privacy_policy=workspace.privacy_policy,
    )


def context_adapter(workspace: ContextWorkspace) -> AdapterResult:
    """Capabilities as negotiated for a host asking for every registry capability (none required)."""
    adapter = workspace_adapter(workspace)
    negotiation = adapter.negotiate_capabilities(
        [CapabilityRequest(id=capability) for capability in CAPABILITY_REGISTRY_V1]
    )
    lines = tuple(
        CapabilityLine(
            id=status.id,
            supported=status.supported,
            version=status.version,
            reason=status.reason,
            requested=status.requested,
            enabled=status.enabled,
        )
        for status in negotiation.statuses
    )
    return AdapterResult(
        runtime_id=adapter.identity.adapter_name,
        contract_version=negotiation.contract_version,
        enabled=len(negotiation.enabled),
        disabled=len(negotiation.disabled),
        capabilities=lines,
        diagnostics=tuple(f"{d.severity} {d.code}" for d in adapter.diagnostics()),
    )


def context_privacy(workspace: ContextWorkspace) -> PrivacyResult:
    """What privacy enforcement would do to the next request (counts only, never the payload).

    The request is built and checked the way the adapter's ``complete()`` does it (the same payload
    builder, the adapter's own ``enforce_privacy``), so the preview cannot drift from what is sent.
    """
    if workspace.model is not None:
        messages = workspace.plan().messages
        provider, model = workspace.model.provider, workspace.model.id
    else:
        messages = workspace.context.messages
        provider, model = workspace.context.provider or _NO_PROVIDER, _NO_PROVIDER
    policy = workspace.privacy_policy
    request = CompletionRequest(provider=provider, model=model, payload=completion_payload(messages))
    try:
        result = workspace_adapter(workspace).enforce_privacy(request)
    except ValueError as error:
        raise CommandError("privacy-check-failed", "privacy enforcement failed closed") from error
    return PrivacyResult(
        provider=provider,
        destination=result.destination,
        enabled=policy.enabled,
        changed=result.changed,
        blocked_blocks=result.blocked_blocks,
        secret_redactions=result.secret_redactions,
        policy_version=privacy_policy_version(policy),
    )
