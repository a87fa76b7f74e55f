"""``python -m ds4_context_core``: a small, offline demonstration of canonical history and tool groups."""

from __future__ import annotations

import sys

from ._history._groups import build_canonical_tool_atomic_groups
from ._history._model import (
    CanonicalBlock,
    CanonicalMessage,
    MessageRole,
    Provenance,
    TextBlock,
    ToolCallBlock,
    ToolResultBlock,
)
from ._history._stable_json import stable_hash
from ._tokens._estimators import estimate_message_tokens
from ._version import __version__


def _message(entry: str, role: MessageRole, *blocks: CanonicalBlock) -> CanonicalMessage:
    return CanonicalMessage(
        id=f"demo:{entry}",
        source_entry_id=entry,
        role=role,
        blocks=blocks,
        provenance=Provenance(source="runtime-session", session_id="demo", entry_id=entry, runtime_id="demo"),
    )


def main() -> int:
    history = [
        _message("u1", "user", TextBlock(text="Why does the parser reject trailing commas?")),
        _message(
            "a1",
            "assistant",
            ToolCallBlock(id="call-1", name="read", arguments={"path": "src/parser.py"}),
            ToolCallBlock(id="call-2", name="grep", arguments={"pattern": "trailing"}),
        ),
        _message(
            "r1",
            "tool",
            ToolResultBlock(tool_call_id="call-1", tool_name="read", content="def parse(...): ..."),
        ),
        _message(
            "r2", "tool", ToolResultBlock(tool_call_id="call-2", tool_name="grep", content="parser.py:88")
        ),
        _message("a2", "assistant", ToolCallBlock(id="call-3", name="bash", arguments={"command": "pytest"})),
    ]
    out = sys.stdout
    out.write(f"ds4-context-core {__version__}: {len(history)} canonical messages\n")
    for message in history:
        out.write(
            f"  {message.id:<10} {message.role:<9} ~{estimate_message_tokens(message)} tokens (chars-v1)\n"
        )
    out.write("tool atomic groups (a call and all its results are one unit; parallel calls share one):\n")
    for group in build_canonical_tool_atomic_groups(history):
        state = "complete" if group.complete else "INCOMPLETE: never sent to a provider"
        out.write(
            f"  {group.id}  calls={','.join(group.tool_call_ids)}"
            f"  messages={len(group.message_ids)}  {state}\n"
        )
    out.write(f"history hash (stable JSON, sha256): {stable_hash(history)[:16]}...\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
