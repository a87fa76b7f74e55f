"""A conformance factory for :class:`PiSessionAdapter`: the kit's fixture written as a real Pi session.

Each case gets a fresh private temporary directory holding one v3 session file whose entries carry the
fixture's entry ids; the directory is the trusted root and is removed afterwards.

A pinned message is written with a ``ds4-context.pin`` custom entry after it (the event ``ds4-context
pin`` appends), and the adapter's snapshot marks it pinned. A Pi session has no system message (Pi's
system prompt lives in the agent, not in the file) and no form for a local-only mark: the factory
declares those two parts of the fixture unsupported, and the kit's report lists them as skipped.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Final

import msgspec

from ._adapter import PiSessionAdapter
from ._convert import canonical_to_pi_message
from ._index import PIN_CUSTOM_TYPE

if TYPE_CHECKING:  # the kit is imported only when a factory is asked for
    from ds4_context_core.conformance import (
        ConformanceFixture,
        ConformanceSubject,
        ConformanceTransport,
        SimpleConformanceFactory,
    )

__all__ = [
    "PI_CONFORMANCE_FACTORY_NAME",
    "pi_session_conformance_factory",
]

PI_CONFORMANCE_FACTORY_NAME: Final = "ds4-context-engine.pi"
_UNSUPPORTED_HISTORY_PARTS: Final = frozenset({"system", "local-only-flag"})
_encoder: Final = msgspec.json.Encoder()


def _write_fixture_session(directory: Path, fixture: ConformanceFixture) -> Path:
    path = directory / "session.jsonl"
    lines = [
        _encoder.encode(
            {
                "type": "session",
                "version": 3,
                "id": fixture.session_id,
                "timestamp": "2026-01-01T00:00:00.000Z",
                "cwd": str(directory),
            }
        )
    ]
    parent: str | None = None
    for message in fixture.messages:
        entry_id = message.source_entry_id
        lines.append(
            _encoder.encode(
                {
                    "type": "message",
                    "id": entry_id,
                    "parentId": parent,
                    "timestamp": "2026-01-01T00:00:00.000Z",
                    "message": canonical_to_pi_message(message),
                }
            )
        )
        parent = entry_id
        if message.flags is not None and message.flags.pinned:
            # a pin is an event in the session (as ``ds4-context pin`` writes it), replayed by the adapter
            pin_id = f"{entry_id}-pin"
            lines.append(
                _encoder.encode(
                    {
                        "type": "custom",
                        "id": pin_id,
                        "parentId": parent,
                        "timestamp": "2026-01-01T00:00:00.000Z",
                        "customType": PIN_CUSTOM_TYPE,
                        "data": {"entryId": entry_id},
                    }
                )
            )
            parent = pin_id
    path.write_bytes(b"\n".join(lines) + b"\n")
    path.chmod(0o600)
    return path


def _create(fixture: ConformanceFixture, transport: ConformanceTransport) -> ConformanceSubject:
    from ds4_context_core.conformance import ConformanceSubject  # noqa: PLC0415

    directory = Path(tempfile.mkdtemp(prefix="ds4-pi-conformance-")).resolve()
    session = _write_fixture_session(directory, fixture)
    adapter = PiSessionAdapter(session, trusted_roots=[directory], transport=transport, model=fixture.model)
    return ConformanceSubject(
        adapter=adapter,
        expected_project_root=str(directory),
        cleanup=lambda: shutil.rmtree(directory, ignore_errors=True),
    )


def pi_session_conformance_factory() -> SimpleConformanceFactory:
    """The factory ``ds4-context conformance`` runs; also usable as ``package.module:factory`` target."""
    from ds4_context_core.conformance import SimpleConformanceFactory  # noqa: PLC0415

    return SimpleConformanceFactory(
        name=PI_CONFORMANCE_FACTORY_NAME,
        create=_create,
        unsupported_history_parts=_UNSUPPORTED_HISTORY_PARTS,
    )
