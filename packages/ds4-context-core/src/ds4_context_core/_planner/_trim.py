"""Layer 1: trim the largest, least needed tool results to their head and tail, lowest keep first."""

from __future__ import annotations

import heapq
from collections.abc import Mapping
from typing import TYPE_CHECKING

import msgspec

from ds4_context_core._history._model import CanonicalBlock, CanonicalMessage, ToolResultBlock

from ._common import NameCache
from ._decisions import Decisions, PlanInputs, Trim
from ._index import normalize_tool_name as _norm
from ._pruning import trim_text
from ._verdicts import Verdicts, result_positions

if TYPE_CHECKING:
    from ds4_context_core.config import PruningConfig


def trimmed_copy(message: CanonicalMessage, config: PruningConfig) -> CanonicalMessage | None:
    """Layer-1 copy of a tool-result message; ``None`` when trimming would not gain enough."""
    gained = 0
    blocks: list[CanonicalBlock] = []
    for block in message.blocks:
        if type(block) is ToolResultBlock and len(block.content) >= config.min_chars_to_prune:
            trimmed = trim_text(
                block.content,
                config.head_chars,
                config.tail_chars,
                message.id,
                restore_tool=config.restore_tool,
            )
            if trimmed is not None:
                gained += len(block.content) - len(trimmed)
                blocks.append(msgspec.structs.replace(block, content=trimmed))
                continue
        blocks.append(block)
    if gained <= 0 or gained < config.min_gain_chars:
        return None
    flags = msgspec.structs.replace(message.flags, synthetic=True)
    return msgspec.structs.replace(message, blocks=tuple(blocks), flags=flags)


def _count(gates: dict[str, int], gate: str, count: int = 1) -> None:
    gates[gate] = gates.get(gate, 0) + count


def _eligible(
    inputs: PlanInputs, decisions: Decisions, verdicts: Verdicts, gates: dict[str, int]
) -> list[tuple[float, int]]:
    """(keep, position) of every judged result not yet trimmed that passes the never-prune and size
    gates; the others are counted in ``gates``."""
    pruning = inputs.pruning
    never = frozenset(_norm(name) for name in pruning.never_prune_tools)
    norm = NameCache()
    view, trims = inputs.index.view, decisions.trims
    eligible: list[tuple[float, int]] = []
    for position, verdict in verdicts.bounds.items():
        if position in trims:
            continue
        blocks = view[position].blocks
        if len(blocks) == 1:  # the usual result message: one result block
            block = blocks[0]
            never_prune = norm(block.tool_name) in never  # type: ignore[union-attr]
            size = len(block.content)  # type: ignore[union-attr]
        else:
            results = [block for block in blocks if type(block) is ToolResultBlock]
            never_prune = any(norm(block.tool_name) in never for block in results)
            size = -1 if never_prune else sum(len(block.content) for block in results)
        if never_prune:
            _count(gates, "never-prune")
            continue
        if size < pruning.min_chars_to_prune:
            _count(gates, "too-small")
            continue
        eligible.append((verdict.keep_probability, position))
    return eligible


def trim_results(
    inputs: PlanInputs,
    decisions: Decisions,
    verdicts: Verdicts,
    *,
    need: int,
    gates: dict[str, int],
    trimmed_ids: list[str],
) -> int:
    """Trim results until ``need`` tokens are saved or none is left below the keep limit; the tokens
    saved (0 in a dry run, which records what it would trim but keeps nothing)."""
    pruning = inputs.pruning
    index = inputs.index
    eligible = _eligible(inputs, decisions, verdicts, gates)
    sparse = len(eligible) < pruning.sparse_candidate_count
    limit = pruning.sparse_keep_floor if sparse else pruning.protect_keep_probability
    saved = 0
    # Lowest keep first, as sorting would give; a pending bound is settled when it comes up and
    # goes back in if evidence raised it.
    heapq.heapify(eligible)
    while eligible and saved < need:
        keep, position = eligible[0]
        if keep >= limit:  # so is every keep left: all of them are protected
            _count(gates, "protected", len(eligible))
            break
        heapq.heappop(eligible)
        if not verdicts.settled(position):
            settled = verdicts.settle(position).keep_probability
            if settled != keep:
                heapq.heappush(eligible, (settled, position))
                continue
        message = trimmed_copy(index.view[position], pruning)
        tokens = 0 if message is None else inputs.estimator(message)
        gain = 0 if message is None else index.tokens[position] - tokens
        if message is None or gain <= 0:
            _count(gates, "low-gain")
            continue
        trimmed_ids.append(message.id)
        saved += gain
        if not pruning.dry_run:
            decisions.trims[position] = Trim(position=position, message=message, tokens=tokens, score=keep)
            decisions.unit_tokens[index.unit_of(position)] -= gain
    return 0 if pruning.dry_run else saved


def trim_turn(
    inputs: PlanInputs,
    decisions: Decisions,
    roots: list[int],
    *,
    need: int,
    skip: Mapping[int, object],
    trimmed_ids: list[str],
) -> int:
    """Trim the results of the turn in progress (the units ``roots``), largest first, until ``need``
    tokens are saved; the tokens saved.

    The cut drops whole units, so without this a turn whose newest results alone pass the budget would
    lose them with nothing in their place. A trimmed copy keeps the head, the tail and a marker naming
    how to restore the rest. The preserve-recent and keep gates of layer 1 do not apply (the other
    choice is dropping the result), the never-prune tools do; units in ``skip`` (mandatory) and
    receipted units are left alone, and a dry run trims nothing.
    """
    pruning = inputs.pruning
    if not pruning.enabled or pruning.dry_run or need <= 0:
        return 0
    index = inputs.index
    never = frozenset(_norm(name) for name in pruning.never_prune_tools)
    norm = NameCache()
    chosen = [root for root in roots if root not in skip and root not in decisions.receipt_of]
    positions = [p for p in result_positions(index, chosen) if p not in decisions.trims]
    positions.sort(key=lambda position: (-index.tokens[position], position))
    saved = 0
    for position in positions:
        if saved >= need:
            break
        blocks = index.view[position].blocks
        if any(type(b) is ToolResultBlock and norm(b.tool_name) in never for b in blocks):
            continue
        message = trimmed_copy(index.view[position], pruning)
        tokens = 0 if message is None else inputs.estimator(message)
        gain = 0 if message is None else index.tokens[position] - tokens
        if message is None or gain <= 0:
            continue
        decisions.trims[position] = Trim(position=position, message=message, tokens=tokens, score=None)
        decisions.unit_tokens[index.unit_of(position)] -= gain
        trimmed_ids.append(message.id)
        saved += gain
    return saved
