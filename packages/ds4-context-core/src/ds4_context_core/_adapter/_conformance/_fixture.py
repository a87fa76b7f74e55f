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
    "CONFORMANCE_HISTORY_PARTS",
    "ConformanceFixture",
    "ConformanceTransport",
    "load_conformance_fixture",
]

CONFORMANCE_FIXTURE_VERSION: Final = "runtime-adapter-conformance-fixture-v2"
_FIXTURE_FILE: Final = "fixture-v2.json"
#: The parts of a history the v2 fixture exercises beyond plain text and one tool call. A factory whose
#: runtime has no form for one lists it in ``unsupported_history_parts``; the kit then leaves that part's
#: messages out of the fixture it hands over and names the part in ``ConformanceReport.skipped_parts``.
CONFORMANCE_HISTORY_PARTS: Final = (
    "system",
    "image",
    "thinking",
    "parallel-tool-calls",
    "pinned-flag",
    "local-only-flag",
)


class ConformanceFixture(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """The canonical history, model and transport answer every adapter under test is built from."""

    version: str
    runtime_id: str
    session_id: str
    model: ModelDescriptor
    messages: tuple[CanonicalMessage, ...]
    #: message ids per part of :data:`CONFORMANCE_HISTORY_PARTS` (a part's messages stand on their own)
    parts: dict[str, tuple[str, ...]]
    transport_output: dict[str, Any]

    @property
    def message_ids(self) -> tuple[str, ...]:
        """Message ids in history order."""
        return tuple(message.id for message in self.messages)

    def tool_atomic_groups(self) -> tuple[RuntimeToolAtomicGroup, ...]:
        """The groups a correct snapshot of this history must carry."""
        return build_canonical_tool_atomic_groups(self.messages)

    def part_of(self, message_id: str) -> str | None:
        """The part ``message_id`` exercises, or ``None`` for the plain messages every adapter carries."""
        return next((part for part, ids in self.parts.items() if message_id in ids), None)

    def without(self, parts: frozenset[str]) -> ConformanceFixture:
        """This fixture with the messages of ``parts`` left out (and those parts dropped from ``parts``)."""
        if not parts:
            return self
        left_out = {message_id for part in parts for message_id in self.parts.get(part, ())}
        return msgspec.structs.replace(
            self,
            messages=tuple(message for message in self.messages if message.id not in left_out),
            parts={part: ids for part, ids in self.parts.items() if part not in parts},
        )


def load_conformance_fixture() -> ConformanceFixture:
    """Read ``runtime-adapter-conformance-fixture-v2`` from the installed package."""
    raw = resources.files(__package__).joinpath(_FIXTURE_FILE).read_bytes()
    fixture = msgspec.json.decode(raw, type=ConformanceFixture)
    if (  # a packaging mistake, not a user error
        fixture.version != CONFORMANCE_FIXTURE_VERSION or tuple(fixture.parts) != CONFORMANCE_HISTORY_PARTS
    ):
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
