import msgspec
import pytest

from ds4_context_core.adapter import (
    CAPABILITY_REASON_MAX_CHARS,
    CAPABILITY_REGISTRY_V1,
    RUNTIME_ADAPTER_CONTRACT_VERSION,
    CapabilityDeclaration,
    CapabilityRequest,
    negotiate_runtime_capabilities,
)


def _valid_declarations() -> list[CapabilityDeclaration]:
    return [
        CapabilityDeclaration(id="compaction", supported=True, version="pi-session-compact-v1"),
        CapabilityDeclaration(id="provider-continuation", supported=False, reason="not offered"),
        CapabilityDeclaration(id="embeddings", supported=True, version="embedding-port-v1"),
        CapabilityDeclaration(id="local-kv-reuse", supported=False, reason="no local runtime"),
    ]


def test_registry_v1_is_frozen_in_its_published_order():
    assert CAPABILITY_REGISTRY_V1 == ("compaction", "provider-continuation", "embeddings", "local-kv-reuse")
    assert RUNTIME_ADAPTER_CONTRACT_VERSION == "runtime-adapter-v1"


def test_supported_requests_are_enabled_and_unsupported_ones_disabled_with_severity_by_required():
    result = negotiate_runtime_capabilities(
        _valid_declarations(),
        [
            CapabilityRequest(id="compaction"),
            CapabilityRequest(id="provider-continuation", required=True),
            CapabilityRequest(id="local-kv-reuse"),
        ],
    )
    assert result.contract_version == "runtime-adapter-v1"
    assert [status.id for status in result.statuses] == list(CAPABILITY_REGISTRY_V1)
    assert result.enabled == ("compaction",)
    assert result.disabled == ("provider-continuation", "local-kv-reuse")
    assert [(d.code, d.severity, d.capability) for d in result.diagnostics] == [
        ("capability-unsupported", "warning", "provider-continuation"),
        ("capability-unsupported", "info", "local-kv-reuse"),
    ]
    embeddings = result.statuses[2]
    assert (embeddings.supported, embeddings.requested, embeddings.enabled) == (True, False, False)
    assert embeddings.version == "embedding-port-v1"


@pytest.mark.parametrize(
    ("broken", "problem"),
    [
        ([], "no declaration"),
        (
            [
                CapabilityDeclaration(id="embeddings", supported=True, version="v1"),
                CapabilityDeclaration(id="embeddings", supported=True, version="v1"),
            ],
            "duplicate declarations",
        ),
        ([CapabilityDeclaration(id="embeddings", supported=True)], "supported without a valid version"),
        (
            [CapabilityDeclaration(id="embeddings", supported=True, version="has space")],
            "supported without a valid version",
        ),
        ([CapabilityDeclaration(id="embeddings", supported=True, version="x" * 65)], "supported without"),
        ([CapabilityDeclaration(id="embeddings", supported=False, reason="  \n\t ")], "without a reason"),
        ([CapabilityDeclaration(id="embeddings", supported=False)], "unsupported without a reason"),
    ],
)
def test_a_malformed_declaration_disables_only_its_own_capability(broken, problem):
    declarations = [d for d in _valid_declarations() if d.id != "embeddings"] + broken
    requests = [CapabilityRequest(id=capability, required=True) for capability in CAPABILITY_REGISTRY_V1]
    result = negotiate_runtime_capabilities(declarations, requests)
    assert result.enabled == ("compaction",)
    assert "embeddings" in result.disabled
    (invalid,) = [d for d in result.diagnostics if d.code == "capability-declaration-invalid"]
    assert invalid.capability == "embeddings"
    assert invalid.severity == "warning"
    assert problem in invalid.message
    assert result.statuses[2].supported is False
    assert result.statuses[2].enabled is False


def test_malformed_declaration_is_info_when_not_required():
    result = negotiate_runtime_capabilities([], [CapabilityRequest(id="compaction")])
    assert {d.severity for d in result.diagnostics} == {"info"}
    assert len(result.diagnostics) == len(CAPABILITY_REGISTRY_V1)


def test_duplicate_requests_merge_with_required_ored():
    result = negotiate_runtime_capabilities(
        _valid_declarations(),
        [CapabilityRequest(id="local-kv-reuse"), CapabilityRequest(id="local-kv-reuse", required=True)],
    )
    status = result.statuses[3]
    assert (status.requested, status.required) == (True, True)
    assert result.disabled == ("local-kv-reuse",)
    assert [d.severity for d in result.diagnostics] == ["warning"]


def test_reasons_are_collapsed_and_bounded():
    reason = "line one\n\n   line\ttwo " + "x" * 500
    declarations = [
        *_valid_declarations()[:3],
        CapabilityDeclaration(id="local-kv-reuse", supported=False, reason=reason),
    ]
    status = negotiate_runtime_capabilities(declarations).statuses[3]
    assert status.reason is not None
    assert status.reason.startswith("line one line two x")
    assert len(status.reason) == CAPABILITY_REASON_MAX_CHARS


def test_versions_are_case_insensitive_and_unknown_requests_never_break_negotiation():
    declarations = [
        *_valid_declarations()[:2],
        CapabilityDeclaration(id="embeddings", supported=True, version="Embed.V1_x-2"),
        _valid_declarations()[3],
    ]
    result = negotiate_runtime_capabilities(
        declarations, [CapabilityRequest(id="embeddings"), CapabilityRequest(id="teleport\x00" + "y" * 100)]
    )
    assert result.enabled == ("embeddings",)
    assert result.disabled == (("teleport\x00" + "y" * 100)[:32],)
    (unknown,) = result.diagnostics
    assert unknown.code == "capability-unsupported"
    assert unknown.capability is None
    assert "y" * 40 not in unknown.message


def test_wire_form_uses_camel_case():
    result = negotiate_runtime_capabilities(_valid_declarations(), [CapabilityRequest(id="compaction")])
    wire = msgspec.to_builtins(result)
    assert wire["contractVersion"] == "runtime-adapter-v1"
    assert set(wire) == {"contractVersion", "statuses", "enabled", "disabled", "diagnostics"}
