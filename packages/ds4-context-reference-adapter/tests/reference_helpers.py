"""Builders shared by the reference adapter tests (a uniquely named module: tests dirs share sys.path)."""

from __future__ import annotations

import hashlib
from pathlib import Path

from ds4_context_core import CanonicalBlock, CanonicalMessage, MessageFlags, Provenance, TextBlock

SESSION = "session-1"
RUNTIME = "jsonl-reference"


def make_message(
    entry: str,
    *blocks: CanonicalBlock,
    role: str = "user",
    session: str = SESSION,
    runtime: str | None = RUNTIME,
) -> CanonicalMessage:
    atomic = any(block.__class__.__name__ in ("ToolCallBlock", "ToolResultBlock") for block in blocks)
    return CanonicalMessage(
        id=f"{session}:{entry}",
        source_entry_id=entry,
        role=role,  # type: ignore[arg-type]
        blocks=blocks or (TextBlock(text=f"text of {entry}"),),
        provenance=Provenance(
            source="runtime-session", session_id=session, entry_id=entry, runtime_id=runtime
        ),
        flags=MessageFlags(atomic=True) if atomic else MessageFlags(),
    )


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()
