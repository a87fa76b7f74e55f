"""A realistic long coding session, written as a real Pi session file, for ``ds4-context demo``.

The session is deterministic (same bytes every time apart from the header timestamp): a user asks an
agent to add rate limiting to a small web service; the agent explores the code base with many read-only
tool calls (some in parallel), runs the tests, edits files and reports back, over several turns.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Final

from ds4_context_engine.pi import append_pi_entries, create_pi_session

__all__ = ["DEMO_MODEL_ID", "DEMO_PROVIDER", "DEMO_SESSION_ID", "write_demo_session"]

DEMO_SESSION_ID: Final = "0d3m0000-5e55-4000-8000-00000000c0de"
DEMO_PROVIDER: Final = "openai"
DEMO_MODEL_ID: Final = "gpt-4.1-mini"

_MODULES: Final = (
    "app/server.py",
    "app/routes.py",
    "app/config.py",
    "app/storage.py",
    "app/middleware.py",
    "app/clock.py",
    "app/metrics.py",
    "app/auth.py",
    "tests/test_routes.py",
    "tests/test_storage.py",
)

_HELPERS: Final = ("limits", "window", "client", "clock", "state", "http", "schema", "timing")
_TURNS: Final = (
    "Add per-client rate limiting to the HTTP service: 100 requests per minute, configurable.",
    "Use a sliding window, not a fixed one, and keep it in memory for now.",
    "Make the limit configurable per route in app/config.py.",
    "Add a Retry-After header to throttled responses.",
    "Expose the number of throttled requests as a metric.",
    "Log every throttled request with the client id at info level.",
    "Let trusted internal clients bypass the limiter.",
    "Move the window length and limit defaults into environment variables.",
    "Document the limiter in the README.",
    "Now write tests for the limiter and run the whole suite.",
)


def _source(path: str, lines: int) -> str:
    """Plausible Python source for ``path``: enough bytes to matter to a context window."""
    stem = Path(path).stem
    body = [f'"""{stem}: part of the demo web service."""', "", "from __future__ import annotations", ""]
    for number in range(lines):
        body.append(f"def {stem}_helper_{number}(request, settings):")
        body.append(f"    # route {number} reads the client id and the configured window for {stem}")
        body.append(f"    client = request.headers.get('x-client-id', 'anonymous-{number}')")
        body.append(f"    return settings.get('{stem}.window_{number}', 60), client")
        body.append("")
    return "\n".join(body)


def _usage(tokens: int) -> dict[str, Any]:
    return {
        "input": tokens,
        "output": 120,
        "cacheRead": 0,
        "cacheWrite": 0,
        "totalTokens": tokens + 120,
        "cost": {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0, "total": 0},
    }


class _Writer:
    def __init__(self) -> None:
        self.entries: list[tuple[str, dict[str, Any]]] = []
        self.clock = 1_772_000_000_000
        self.calls = 0

    def _tick(self) -> int:
        self.clock += 1_500
        return self.clock

    def user(self, text: str) -> None:
        message = {"role": "user", "content": text, "timestamp": self._tick()}
        self.entries.append(("message", {"message": message}))

    def assistant(self, text: str, calls: list[tuple[str, dict[str, Any]]]) -> list[str]:
        ids = []
        content: list[dict[str, Any]] = [{"type": "text", "text": text}]
        for name, arguments in calls:
            self.calls += 1
            call_id = f"call_{self.calls:04d}"
            ids.append(call_id)
            content.append({"type": "toolCall", "id": call_id, "name": name, "arguments": arguments})
        message = {
            "role": "assistant",
            "content": content,
            "api": "openai-responses",
            "provider": DEMO_PROVIDER,
            "model": DEMO_MODEL_ID,
            "usage": _usage(1000 + self.calls * 40),
            "stopReason": "toolUse" if calls else "stop",
            "timestamp": self._tick(),
        }
        self.entries.append(("message", {"message": message}))
        return ids

    def result(self, call_id: str, name: str, text: str, *, is_error: bool = False) -> None:
        message = {
            "role": "toolResult",
            "toolCallId": call_id,
            "toolName": name,
            "content": [{"type": "text", "text": text}],
            "isError": is_error,
            "timestamp": self._tick(),
        }
        self.entries.append(("message", {"message": message}))


def write_demo_session(path: str | os.PathLike[str], *, cwd: str) -> Path:
    """Write the demo session to ``path`` (which must not exist) and return it."""
    target = Path(path)
    create_pi_session(target, cwd=cwd, session_id=DEMO_SESSION_ID, timestamp="2026-03-01T09:00:00.000Z")
    writer = _Writer()
    writer.entries.append(("model_change", {"provider": DEMO_PROVIDER, "modelId": DEMO_MODEL_ID}))
    for turn, request in enumerate(_TURNS):
        writer.user(request)
        # exploration: parallel reads of several modules, then a search
        batch = [_MODULES[(turn * 3 + offset) % len(_MODULES)] for offset in range(3)]
        call_ids = writer.assistant(
            f"Reading {', '.join(batch)} to see how requests flow.",
            [("read", {"path": module}) for module in batch],
        )
        for call_id, module in zip(call_ids, batch, strict=True):
            writer.result(call_id, "read", _source(module, 18 + turn * 2))
        if turn % 2 == 1:
            # a skim of small helpers: each result is too small to trim, together they are worth a receipt
            helpers = [f"app/{name}.py" for name in _HELPERS]
            helper_ids = writer.assistant(
                "Skimming the small helper modules.", [("read", {"path": helper}) for helper in helpers]
            )
            for call_id, helper in zip(helper_ids, helpers, strict=True):
                constants = (
                    f"WINDOW_{index}_{turn} = {60 * (index + 1)}  # seconds for {helper}"
                    for index in range(7)
                )
                writer.result(call_id, "read", "\n".join(constants))
        (grep_id,) = writer.assistant(
            "Searching for where the client id is read.",
            [("grep", {"pattern": "x-client-id", "path": "app"})],
        )
        matches = "\n".join(f"app/{_MODULES[i % 8][4:]}:{10 + i}:    client = ..." for i in range(40))
        writer.result(grep_id, "grep", matches)
        # many small lookups in one parallel batch: too small to trim one by one, fine to receipt together
        lookups = [f"app/{name}" for name in ("server", "routes", "config", "storage", "clock", "metrics")]
        lookup_ids = writer.assistant(
            "Checking where each module keeps its settings.",
            [("find", {"path": lookup}) for lookup in lookups],
        )
        for call_id, lookup in zip(lookup_ids, lookups, strict=True):
            found = "\n".join(
                f"{lookup}/{part}_{turn}_{index}.py"
                for index, part in enumerate(
                    (
                        "handlers",
                        "settings",
                        "views",
                        "models",
                        "routing",
                        "window",
                        "client",
                        "limits",
                        "state",
                        "timing",
                        "http",
                        "schema",
                    )
                )
            )
            writer.result(call_id, "find", found)
        (listing_id,) = writer.assistant("Listing the package.", [("ls", {"path": "app"})])
        writer.result(listing_id, "ls", "\n".join(module for module in _MODULES if module.startswith("app/")))
        # change and verify
        target_module = _MODULES[turn % 5]
        (edit_id,) = writer.assistant(
            f"Updating {target_module} for this step.",
            [("edit", {"path": target_module, "oldText": "return settings", "newText": "return limiter"})],
        )
        writer.result(edit_id, "edit", f"Edited {target_module}: 1 replacement")
        (test_id,) = writer.assistant("Running the test suite.", [("bash", {"command": "pytest -q"})])
        passed = 40 + turn * 6
        writer.result(test_id, "bash", f"{'.' * passed}\n{passed} passed in {1.2 + turn / 10:.2f}s")
        writer.assistant(
            f"Step {turn + 1} done: {request.split(':')[0].lower()} is in place and {passed} tests pass.", []
        )
    writer.user("Summarise what changed and which files you touched.")
    append_pi_entries(target, writer.entries, timestamp="2026-03-01T09:00:01.000Z")
    return target
