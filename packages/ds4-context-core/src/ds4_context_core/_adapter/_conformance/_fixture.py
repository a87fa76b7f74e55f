"""The versioned conformance fixture (package data) and the recording transport handed to factories."""

from __future__ import annotations

import copy
from importlib import resources
from typing import Any, Final

import msgspec

from ds4_context_core._adapter._types import CompletionRequest
from ds4_context_core._exceptions import ConformanceTransportError
from ds4_context_core._history._groups import build_canonical_tool_atomic_groups
from ds4_context_core._history._model import CanonicalMessage, ModelDescriptor, RuntimeToolAtomicGroup

__all__ = [
    "CONFORMANCE_FIXTURE_VERSION",
    "ConformanceFixture",
    "ConformanceTransport",
    "load_conformance_fixture",
]

CONFORMANCE_FIXTURE_VERSION: Final = "runtime-adapter-conformance-fixture-v1"
_FIXTURE_FILE: Final = "fixture-v1.json"


class ConformanceFixture(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """The canonical history, model and transport answer every adapter under test is built from."""

    version: str
    runtime_id: str
    session_id: str
    model: ModelDescriptor
    messages: tuple[CanonicalMessage, ...]
    transport_output: dict[str, Any]

    @property
    def message_ids(self) -> tuple[str, ...]:
        """Message ids in history order."""
        return tuple(message.id for message in self.messages)

    def tool_atomic_groups(self) -> tuple[RuntimeToolAtomicGroup, ...]:
        """The groups a correct snapshot of this history must carry."""
        return build_canonical_tool_atomic_groups(self.messages)


def load_conformance_fixture() -> ConformanceFixture:
    """Read ``runtime-adapter-conformance-fixture-v1`` from the installed package."""
    raw = resources.files(__package__).joinpath(_FIXTURE_FILE).read_bytes()
    fixture = msgspec.json.decode(raw, type=ConformanceFixture)
    if fixture.version != CONFORMANCE_FIXTURE_VERSION:  # a packaging mistake, not a user error
        raise RuntimeError("the shipped conformance fixture has an unexpected version")
    return fixture


class ConformanceTransport:
    """The provider boundary the kit injects: it records what it was sent and can fail once on demand.

    An adapter calls it with the request carrying the *sanitized* payload. It answers with a fresh copy of
    the fixture's transport output.
    """

    def __init__(self, output: dict[str, Any]) -> None:
        self._output = output
        self._fail_next = False
        self.received: list[Any] = []

    @property
    def calls(self) -> int:
        """How many times the adapter invoked the transport."""
        return len(self.received)

    def fail_next(self) -> None:
        """Make the next call raise :class:`ConformanceTransportError`."""
        self._fail_next = True

    async def __call__(self, request: CompletionRequest) -> Any:
        self.received.append(request)
        if self._fail_next:
            self._fail_next = False
            raise ConformanceTransportError
        return copy.deepcopy(self._output)
