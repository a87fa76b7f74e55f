"""The judge: one verdict (keep and side-effect probabilities) per tool result a compaction may prune.

Layer 1 (``_trim``) takes results lowest keep first; layer 2 (``_receipts``) reads every verdict.
"""

from __future__ import annotations

from collections.abc import Sequence

import msgspec

from ds4_context_core._history._model import TextBlock, ToolCallBlock, ToolResultBlock

from ._common import NameCache
from ._decisions import PlanInputs
from ._index import HistoryIndex, call_path
from ._index import normalize_tool_name as _norm
from ._pruning import DefaultJudge, Judge, JudgeCandidate, Verdict, evidence_words, scan_evidence
from ._types import PlanDiagnostic


class Verdicts:
    """The judge's verdict per candidate position, in candidate order.

    With the default judge, a candidate whose evidence scan has not run yet (``pending``) holds its
    verdict without evidence. Evidence only ever raises the default judge's keep, so that verdict is a
    lower bound: layer 1 takes candidates lowest keep first and scans only those it reaches before
    freeing enough, and whatever reads every verdict asks for ``final`` first. Scanning costs more
    than the rest of judging, and the largest results are trimmed before the rest are looked at.
    """

    __slots__ = ("_cache", "_judge", "_pending", "_words", "bounds")

    def __init__(
        self,
        bounds: dict[int, Verdict],
        pending: dict[int, JudgeCandidate] | None = None,
        judge: DefaultJudge | None = None,
        cache: dict[int, bool] | None = None,
        words: tuple[str, ...] = (),
    ) -> None:
        self.bounds = bounds
        self._pending = pending or {}
        self._judge = judge
        self._cache = cache
        self._words = words

    def settled(self, position: int) -> bool:
        return position not in self._pending

    def settle(self, position: int) -> Verdict:
        candidate = self._pending.pop(position, None)
        if candidate is not None:
            # Both are given whenever anything is pending.
            assert self._judge is not None
            assert self._cache is not None
            evidence = scan_evidence(candidate.content, self._words)
            self._cache[position] = evidence
            if evidence:
                verdict = self._judge._one(msgspec.structs.replace(candidate, has_evidence=True))
                self.bounds[position] = verdict
        return self.bounds[position]

    def final(self) -> dict[int, Verdict]:
        for position in list(self._pending):
            self.settle(position)
        return self.bounds


def result_positions(index: HistoryIndex, roots: Sequence[int]) -> list[int]:
    """Positions of the messages holding a tool result in the units rooted at ``roots``."""
    view = index.view
    found = []
    for root in roots:
        for position in index.unit_members(root):
            if ToolResultBlock in map(type, view[position].blocks):
                found.append(position)
    return found


def _path_touches(inputs: PlanInputs, start: int) -> dict[str, dict[str, int]]:
    """path -> normalised tool name -> last position of a call on that path, from ``start`` on."""
    index = inputs.index
    parent, view = index.parent, index.view
    norm = NameCache()
    touches: dict[str, dict[str, int]] = {}
    for position in range(max(0, start - 1), inputs.size):
        if parent[position] < 0:
            continue
        for block in view[position].blocks:
            if type(block) is ToolCallBlock:
                path = call_path(block)
                if path is not None:
                    touches.setdefault(path, {})[norm(block.name)] = position
    return touches


class _Candidates:
    """Builds the judge's candidate for each result position (one compaction's worth)."""

    __slots__ = ("deferring", "inputs", "last", "read_only", "touches", "words", "write")

    def __init__(self, inputs: PlanInputs, positions: list[int], deferring: bool) -> None:
        pruning = inputs.pruning
        self.inputs = inputs
        self.read_only = frozenset(_norm(name) for name in pruning.read_only_tools)
        self.write = frozenset(_norm(name) for name in pruning.write_tools)
        self.touches = _path_touches(inputs, positions[0] if positions else inputs.size)
        self.words = evidence_words(pruning.evidence_words) if positions else ()
        self.last = inputs.size - 1
        self.deferring = deferring

    def build(self, position: int) -> tuple[JudgeCandidate, bool]:
        """The candidate at ``position``, and whether its evidence scan is still to run."""
        index = self.inputs.index
        message = index.view[position]
        blocks = message.blocks
        if len(blocks) == 1:  # the usual result message: one result block
            first = blocks[0]
            content = first.content  # type: ignore[union-attr]
            if type(content) is not str:
                content = "\n".join([content])  # what joining one block gives, or its error
            is_error = bool(first.is_error)  # type: ignore[union-attr]
        else:
            results = [block for block in blocks if type(block) is ToolResultBlock]
            first = results[0]
            content = "\n".join([block.content for block in results])
            is_error = any(block.is_error for block in results)
        call_id = first.tool_call_id  # type: ignore[union-attr]
        call = index.call_block(call_id)
        cache = index.evidence
        evidence = cache.get(position)
        unknown = evidence is None and self.deferring
        if evidence is None and not self.deferring:
            evidence = scan_evidence(content, self.words)
            cache[position] = evidence
        later_reread = later_edited = False
        if call is not None:
            # Whether a later call re-reads (read-only tool) or edits (write tool) the call's file.
            path = call_path(call)
            later = self.touches.get(path) if path is not None else None
            if later:
                call_position = index.callers.get(call_id, position)
                for name, at in later.items():
                    if at > call_position:
                        later_reread = later_reread or name in self.read_only
                        later_edited = later_edited or name in self.write
        candidate = JudgeCandidate(
            message_id=message.id,
            tool_call_id=call_id,
            tool_name=first.tool_name,  # type: ignore[union-attr]
            arguments=dict(call.arguments) if call is not None and isinstance(call.arguments, dict) else {},
            content=content,
            is_error=is_error,
            messages_after=self.last - position,
            later_reread=later_reread,
            later_edited=later_edited,
            has_evidence=bool(evidence),
        )
        return candidate, unknown


def _deferred_verdicts(
    judge: DefaultJudge,
    *,
    positions: list[int],
    candidates: list[JudgeCandidate],
    pending: dict[int, JudgeCandidate],
    inputs: PlanInputs,
    words: tuple[str, ...],
) -> Verdicts | None:
    """Lower-bound verdicts with the scans left pending; ``None`` (with every pending scan done and
    ``candidates`` updated) when the default judge cannot judge a candidate without its evidence."""
    cache = inputs.index.evidence
    try:
        bounds = [judge._one(candidate) for candidate in candidates]
    except Exception:  # a candidate it cannot judge: the eager path fails as it always did
        for number, position in enumerate(positions):
            if position in pending:
                evidence = scan_evidence(candidates[number].content, words)
                cache[position] = evidence
                candidates[number] = msgspec.structs.replace(candidates[number], has_evidence=evidence)
        return None
    return Verdicts(dict(zip(positions, bounds, strict=True)), pending, judge, cache, words)


def _checked_verdicts(
    inputs: PlanInputs, judge: Judge | None, candidates: list[JudgeCandidate], goal: str
) -> Sequence[Verdict] | None:
    """The caller's judge's verdicts, or ``None`` (with a diagnostic) when it fails or answers badly."""
    if judge is None:
        return None
    try:
        verdicts = judge.judge(candidates, goal=goal)
        if len(verdicts) != len(candidates) or not all(
            type(v) is Verdict
            and 0.0 <= v.keep_probability <= 1.0
            and 0.0 <= v.side_effect_probability <= 1.0
            for v in verdicts
        ):
            raise ValueError("malformed verdicts")
    except Exception as error:
        inputs.diagnostics.append(
            PlanDiagnostic(code="judge-failed", detail=f"{type(error).__name__}; default judge used")
        )
        return None
    return verdicts


def judge_results(inputs: PlanInputs, region: list[int], tail: list[int], gates: dict[str, int]) -> Verdicts:
    """Verdicts on the results of ``region`` but the newest ``preserve_recent`` results (``tail`` holds
    the recent tail's units, whose results count towards those)."""
    index = inputs.index
    pruning = inputs.pruning
    positions = result_positions(index, region)
    # preserve_recent protects the newest results even when the recent tail is configured tiny.
    protected = max(0, pruning.preserve_recent - len(result_positions(index, tail)))
    if protected:
        gates["recent"] = gates.get("recent", 0) + min(protected, len(positions))
        positions = positions[: max(0, len(positions) - protected)]
    judge = inputs.judge
    # The default judge is pure and evidence only raises its keep: scan on demand (see Verdicts).
    deferring = type(judge) is DefaultJudge
    build = _Candidates(inputs, positions, deferring)
    candidates: list[JudgeCandidate] = []
    pending: dict[int, JudgeCandidate] = {}
    for position in positions:
        candidate, unknown = build.build(position)
        candidates.append(candidate)
        if unknown:
            pending[position] = candidate
    goal = "".join(
        block.text for block in index.view[index.current_request() or 0].blocks if type(block) is TextBlock
    )
    if pending:
        assert type(judge) is DefaultJudge  # only the default judge leaves scans pending
        deferred = _deferred_verdicts(
            judge,
            positions=positions,
            candidates=candidates,
            pending=pending,
            inputs=inputs,
            words=build.words,
        )
        if deferred is not None:
            return deferred
    verdicts = _checked_verdicts(inputs, judge, candidates, goal)
    if verdicts is None:
        verdicts = DefaultJudge(read_only_tools=build.read_only, write_tools=build.write).judge(
            candidates, goal=goal
        )
    return Verdicts(dict(zip(positions, verdicts, strict=True)))
