"""Token calibration samples from the usage Pi records on its assistant messages.

Pi writes the provider's token counts on every assistant message (``usage``: ``input``, ``output``,
``cacheRead``, ``cacheWrite``, ``totalTokens``). The input of that call is what the provider counted for
the request that produced the message: the branch up to the message's parent, plus Pi's system prompt
and tool definitions, which the session file does not hold and our estimate therefore cannot see.

One sample pairs two consecutive calls of the same model on the same branch, the later request
extending the earlier one (no compaction, no branch switch in between): estimated = our ``chars-v1``
estimate of the messages the later request added, actual = how many more input tokens the provider
counted for it. The system prompt and the tools are in both calls, so they cancel out: a sample measures
the estimator on conversation text only, which is what the planner's limits apply to.

Samples go to the derived store under the profile ``"<provider>:<model>"``. Each is recorded once: the
store remembers each sample's source (the session and the entry, no content), so opening a session twice
adds nothing. Only the newest
``CALIBRATION_RETENTION`` usage messages of a session are looked at, as the store keeps no more.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import MutableSet
from typing import Any, Final

import msgspec

from ds4_context_core.planner import fast_chars_v1
from ds4_context_core.tokens import (
    TOKEN_CALIBRATION_VERSION,
    TokenCalibration,
    calibrate_token_ratio,
    read_reported_input,
)
from ds4_context_engine._exceptions import DerivedStoreError, PiSessionError
from ds4_context_engine.pi import PiEntry, PiSession, build_pi_context, pi_reported_usages
from ds4_context_engine.store import CALIBRATION_RETENTION, DerivedStore

__all__ = [
    "CalibrationScan",
    "calibration_profile",
    "pi_usage_input_tokens",
    "record_calibration_samples",
    "stored_calibration",
]

_USAGE_INVALID: Final = "token-calibration-sample-invalid"
_NO_BASELINE: Final = "token-calibration-no-baseline"
_STORE_FAILED: Final = "derived-store-failed"


class CalibrationScan(msgspec.Struct, frozen=True, kw_only=True):
    """What one pass over a session's usage did. Counts and codes only, never content."""

    usage_messages: int = 0
    recorded: int = 0
    already_recorded: int = 0
    skipped: dict[str, int] = msgspec.field(default_factory=dict)


def calibration_profile(provider: str, model: str) -> str:
    """The store profile samples of one model are kept under (``"openai:gpt-4.1-mini"``)."""
    return f"{provider}:{model}"


def pi_usage_input_tokens(usage: object) -> int | None:
    """The input tokens the provider counted for one call, from Pi's ``usage``; ``None`` when unusable.

    Read by core's :func:`~ds4_context_core.tokens.read_reported_input`: Pi counts cached input apart
    (``input`` + ``cacheRead`` + ``cacheWrite`` is the whole prompt, with or without ``totalTokens``);
    a writer that folded the cache counts into ``input`` is told apart by ``totalTokens``, and a total
    that fits neither is ambiguous. Provider shapes (``prompt_tokens``, ``input_tokens`` with cache
    counts) are read too. Counts must be ints >= 0; a missing ``input``, a zero or an absurd total is
    unusable.
    """
    return read_reported_input(usage).input_tokens


def _source(session_id: str, entry_id: str) -> str:
    """What a sample was measured from, as the store keys it: one entry of one session."""
    return f"{TOKEN_CALIBRATION_VERSION}:{session_id}:{entry_id}"


class _Call(msgspec.Struct, frozen=True):
    entry: PiEntry
    profile: str
    actual: int


def _usage_calls(session: PiSession, skipped: Counter[str]) -> tuple[list[_Call], int]:
    """Assistant messages with usable usage, in file order, and how many carried usage at all.

    A call that ended in an error or was aborted may report partial or zero usage: no signal.
    """
    calls: list[_Call] = []
    usages = pi_reported_usages(session)
    for usage in usages:
        if usage.input_tokens is None or not usage.complete or usage.provider is None or usage.model is None:
            skipped[_USAGE_INVALID] += 1
            continue
        calls.append(_Call(usage.entry, calibration_profile(usage.provider, usage.model), usage.input_tokens))
    return calls, len(usages)


def _previous_calls(session: PiSession, calls: list[_Call]) -> dict[str, str]:
    """For each call, the nearest earlier call on its branch (by entry id), in one pass over the file."""
    call_ids = {call.entry.id for call in calls}
    nearest: dict[str, str] = {}  # entry id -> nearest call at or above it
    previous: dict[str, str] = {}
    for entry in session.entries:  # parents come before their children in a Pi file
        above = nearest.get(entry.parent_id) if entry.parent_id is not None else None
        if entry.id in call_ids:
            if above is not None:
                previous[entry.id] = above
            nearest[entry.id] = entry.id
        elif above is not None:
            nearest[entry.id] = above
    return previous


class _Requests:
    """The request that produced a call: the ids and estimate of its context (memoised per pass).

    A call on the newest branch after its latest compaction was sent exactly the messages that come
    before it in that branch's context, so one context with running estimates answers for all of them;
    any other call (or any call at all when that branch is damaged) gets its own context.
    """

    def __init__(self, session: PiSession) -> None:
        self._session = session
        self._seen: dict[str, tuple[tuple[str, ...], int]] = {}
        self._tip: tuple[tuple[str, ...], list[int], dict[str, int], int] | None = None

    def _tip_view(self) -> tuple[tuple[str, ...], list[int], dict[str, int], int]:
        if self._tip is None:
            context = build_pi_context(self._session)
            running = [0]
            # each message object estimated once per session memo: a refresh pays for new messages only
            memo = self._session.context_memo
            for message in context.messages:
                key = ("chars-v1", id(message))
                known = memo.get(key)
                if known is None or known[0] is not message:
                    known = memo[key] = (message, fast_chars_v1(message))
                running.append(running[-1] + known[1])
            compaction = (
                self._session.entry(context.compaction_entry_id) if context.compaction_entry_id else None
            )
            # a cut branch (a cycle, a dangling parent) is no prefix of anything: no shortcut through it
            on_branch = frozenset(() if context.issues else context.branch_entry_ids)
            positions = {
                message.source_entry_id: index
                for index, message in enumerate(context.messages)
                if message.source_entry_id in on_branch
            }
            self._tip = (
                tuple(message.id for message in context.messages),
                running,
                positions,
                compaction.line if compaction is not None else -1,
            )
        return self._tip

    def __call__(self, entry: PiEntry) -> tuple[tuple[str, ...], int]:
        found = self._seen.get(entry.id)
        if found is None:
            ids, running, positions, compaction_line = self._tip_view()
            index = positions.get(entry.id)
            if index is not None and entry.line > compaction_line:
                found = (ids[:index], running[index])
            elif entry.parent_id is None or self._session.entry(entry.parent_id) is None:
                found = ((), 0)
            else:
                messages = build_pi_context(self._session, entry.parent_id).messages
                found = (tuple(message.id for message in messages), sum(map(fast_chars_v1, messages)))
            self._seen[entry.id] = found
        return found


def record_calibration_samples(
    store: DerivedStore, session: PiSession, *, handled: MutableSet[str] | None = None
) -> CalibrationScan:
    """Derive the samples of ``session`` and record the ones the store does not hold yet.

    ``handled`` (entry ids) lets a caller skip what an earlier pass in this process already settled.
    Never raises for bad usage or a failing store: both are counted in the result's ``skipped``.
    """
    handled = set() if handled is None else handled
    skipped: Counter[str] = Counter()
    calls, with_usage = _usage_calls(session, skipped)
    previous = _previous_calls(session, calls)
    by_id = {call.entry.id: call for call in calls}
    requests = _Requests(session)
    recorded = known = 0
    sources: dict[str, frozenset[str]] = {}  # per profile, read from the store once a pass
    for call in calls[-CALIBRATION_RETENTION:]:
        entry_id = call.entry.id
        if entry_id in handled:
            continue
        try:
            source = _source(session.session_id, entry_id)
            if call.profile not in sources:
                sources[call.profile] = store.calibration_sources(call.profile)
            if source in sources[call.profile]:
                known += 1
                handled.add(entry_id)
                continue
            earlier = by_id.get(previous.get(entry_id, ""))
            if earlier is None or earlier.profile != call.profile:
                skipped[_NO_BASELINE] += 1
                handled.add(entry_id)
                continue
            before_ids, before_tokens = requests(earlier.entry)
            after_ids, after_tokens = requests(call.entry)
            estimated = after_tokens - before_tokens
            actual = call.actual - earlier.actual
            # the later request must extend the earlier one; a compaction or a shrinking count breaks it
            if after_ids[: len(before_ids)] != before_ids or not before_ids or estimated <= 0 or actual <= 0:
                skipped[_NO_BASELINE] += 1
                handled.add(entry_id)
                continue
            if not store.add_calibration_sample(
                call.profile, estimated=estimated, actual=actual, source=source
            ):
                known += 1  # recorded by another process since this pass read the sources
                handled.add(entry_id)
                continue
        except PiSessionError:
            skipped[_NO_BASELINE] += 1
            handled.add(entry_id)
            continue
        except DerivedStoreError:
            skipped[_STORE_FAILED] += 1
            break  # the store gave up on this pass; the next pass tries again
        handled.add(entry_id)
        recorded += 1
    return CalibrationScan(
        usage_messages=with_usage,
        recorded=recorded,
        already_recorded=known,
        skipped=dict(sorted(skipped.items())),
    )


def stored_calibration(
    store: DerivedStore, profile: str, *, previous: TokenCalibration | None = None
) -> TokenCalibration:
    """Core's calibration of the samples stored under ``profile`` (``insufficient-samples`` when few).

    A stored row whose counts are not positive ints (a foreign writer) is passed on as ``(0, 0)``, which
    core counts in ``rejected_invalid`` instead of raising.
    """
    pairs: list[tuple[int, int]] = []
    for sample in store.calibration_samples(profile):
        values: tuple[Any, Any] = (sample.estimated, sample.actual)
        if all(type(value) is int and value > 0 for value in values):
            pairs.append((sample.estimated, sample.actual))
        else:
            pairs.append((0, 0))
    return calibrate_token_ratio(pairs, previous=previous)
