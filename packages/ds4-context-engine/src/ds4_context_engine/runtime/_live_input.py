"""Live input: messages a host pushes while a turn runs, delivered to the turn's next model call.

A message may carry a stable id. The first message with an id owns it (its body is the one delivered);
later pushes of the same id are suppressed. Anonymous messages are legal but delivered at most once: a
route attempt that is retried or failed over resends identified input and drops anonymous input.

Phases, reported to ``on_phase`` and readable with :meth:`LiveInput.phase`:

- ``accepted``: the runtime took the message into the turn's transcript for the next model call;
- ``acknowledged``: a model call that carried it completed, so it is consumed in the transcript;
- ``uncertain``: it was sent, but the call that carried it did not complete (failed, cancelled): the
  provider may or may not have read it;
- ``rejected``: the turn ended before any model call carried it; it was never sent and the host may
  deliver it again in a later turn (its id is released).
"""

from __future__ import annotations

import contextlib
import re
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final, Literal, TypeAlias

from ._errors import RuntimeOptionsError

__all__ = [
    "LIVE_INPUT_MAX_CHARS",
    "LIVE_INPUT_PHASES",
    "LiveInput",
    "LiveInputMessage",
    "LiveInputPhase",
    "LiveInputPhaseEvent",
]

LiveInputPhase: TypeAlias = Literal["accepted", "acknowledged", "uncertain", "rejected"]
LIVE_INPUT_PHASES: Final = ("accepted", "acknowledged", "uncertain", "rejected")
LIVE_INPUT_MAX_CHARS: Final = 1_000_000
_MAX_PENDING: Final = 1024
_ID: Final = re.compile(r"[^\s\x00-\x1f\x7f]{1,128}")


@dataclass(frozen=True, kw_only=True, slots=True)
class LiveInputMessage:
    """One pushed message; ``sequence`` orders messages, ``id`` is the host's stable id (or ``None``)."""

    text: str
    sequence: int
    id: str | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class LiveInputPhaseEvent:
    message_id: str | None
    sequence: int
    phase: LiveInputPhase


class LiveInput:
    """A queue of live input for one turn (or several): thread-safe ``push``, drained by the run loop.

    ``on_phase`` is called synchronously as phases change; an exception it raises is ignored (the
    phase still changes), so a broken host callback cannot cost the user the turn.
    """

    def __init__(self, *, on_phase: Callable[[LiveInputPhaseEvent], object] | None = None) -> None:
        self._lock = threading.Lock()
        self._pending: deque[LiveInputMessage] = deque()
        self._owners: dict[str, int] = {}
        self._phases: dict[int, LiveInputPhase] = {}
        self._sequence = 0
        self._on_phase = on_phase

    def push(self, text: str, *, id: str | None = None) -> bool:
        """Queue ``text``; False when ``id`` was already pushed (the first body wins, this one is dropped)."""
        if not isinstance(text, str) or not text.strip() or len(text) > LIVE_INPUT_MAX_CHARS:
            raise RuntimeOptionsError(
                "live-input-invalid", f"live input must be 1-{LIVE_INPUT_MAX_CHARS} characters of text"
            )
        if id is not None and (not isinstance(id, str) or not _ID.fullmatch(id)):
            raise RuntimeOptionsError(
                "live-input-invalid", "a live input id must be 1-128 visible characters"
            )
        with self._lock:
            if id is not None and id in self._owners:
                return False
            if len(self._pending) >= _MAX_PENDING:
                raise RuntimeOptionsError("live-input-full", f"at most {_MAX_PENDING} live inputs may wait")
            self._sequence += 1
            message = LiveInputMessage(text=text, sequence=self._sequence, id=id)
            if id is not None:
                self._owners[id] = message.sequence
            self._pending.append(message)
            return True

    def phase(self, id: str) -> LiveInputPhase | None:
        """The phase of the message that owns ``id`` (``None`` before the runtime took it)."""
        with self._lock:
            sequence = self._owners.get(id)
            return None if sequence is None else self._phases.get(sequence)

    @property
    def pending(self) -> int:
        with self._lock:
            return len(self._pending)

    # --- the run loop's side ----------------------------------------------------------------------

    def take(self) -> list[LiveInputMessage]:
        """Every waiting message, in order, now ``accepted``."""
        with self._lock:
            taken = list(self._pending)
            self._pending.clear()
        for message in taken:
            self._set(message, "accepted")
        return taken

    def settle(self, messages: list[LiveInputMessage], phase: LiveInputPhase) -> None:
        for message in messages:
            self._set(message, phase)
        if phase == "rejected":
            with self._lock:  # never sent: the id is free for the host to deliver again
                for message in messages:
                    if message.id is not None and self._owners.get(message.id) == message.sequence:
                        del self._owners[message.id]

    def _set(self, message: LiveInputMessage, phase: LiveInputPhase) -> None:
        with self._lock:
            self._phases[message.sequence] = phase
        if self._on_phase is not None:
            with contextlib.suppress(Exception):  # see the class docstring
                self._on_phase(
                    LiveInputPhaseEvent(message_id=message.id, sequence=message.sequence, phase=phase)
                )
