"""Layer 2: where receipts are made.

A receipt replaces a range of adjacent read-only tool steps (calls, results and the assistant's short
notes between them) by one short assistant message naming what was called and how much it returned;
``restore`` gives the originals back. Receipts are sticky like trims (see ``_window``), and the
manifest lists each one as a :class:`ReceiptRecord`.
"""

from __future__ import annotations

from collections.abc import Mapping

from ds4_context_core._history._model import (
    CanonicalMessage,
    MessageFlags,
    Provenance,
    TextBlock,
    ThinkingBlock,
    ToolCallBlock,
    ToolResultBlock,
)

from ._common import hash16
from ._decisions import Decisions, PlanInputs, Receipt
from ._index import HistoryIndex
from ._index import normalize_tool_name as _norm
from ._pruning import ReceiptCall, Verdict, build_receipt_text
from ._types import ReceiptRecord
from ._verdicts import Verdicts


def _count(gates: dict[str, int], gate: str, count: int = 1) -> None:
    gates[gate] = gates.get(gate, 0) + count


def _gate(
    inputs: PlanInputs, members: list[int], final: Mapping[int, Verdict], read_only: frozenset[str]
) -> str | None:
    """The first gate that keeps the unit of ``members`` from a receipt, or ``None`` when it may have one."""
    pruning = inputs.pruning
    index = inputs.index
    view = index.view
    calls = [b for p in members for b in view[p].blocks if type(b) is ToolCallBlock]
    only_reads = pruning.receipt_tools == "read-only"
    if not calls or (only_reads and any(_norm(call.name) not in read_only for call in calls)):
        return "not-read-only"
    text = sum(
        len(b.text)
        for p in members
        for b in view[p].blocks
        if type(b) is TextBlock and view[p].role == "assistant"
    )
    if text > pruning.receipt_max_assistant_chars:
        return "assistant-text-too-long"
    thinking = sum(len(b.thinking) for p in members for b in view[p].blocks if type(b) is ThinkingBlock)
    if thinking > pruning.receipt_max_reasoning_chars:
        return "reasoning-too-long"
    unit_verdicts = [final[p] for p in members if p in final]
    if not unit_verdicts:
        return "recent"  # no judged result (an interrupted call alone): nothing to weigh
    if len(unit_verdicts) != sum(
        1 for p in members if any(type(b) is ToolResultBlock for b in view[p].blocks)
    ):
        return "recent"
    if any(index.evidence.get(p, False) for p in members if p in final) or any(
        v.reason == "evidence" for v in unit_verdicts
    ):
        return "evidence"
    # A receipt of any tool kind states what a call changed and that it must not be repeated, so the
    # side-effect gate only holds receipts to read-only steps when the host asks for that.
    if only_reads and max(v.side_effect_probability for v in unit_verdicts) > pruning.receipt_max_side_effect:
        return "side-effect"
    return None


def _keeps(
    inputs: PlanInputs, region: list[int], verdicts: Verdicts, gates: dict[str, int]
) -> dict[int, float]:
    """Tool unit root -> the highest keep of its results, for every unit of ``region`` past the gates."""
    index = inputs.index
    final = verdicts.final()
    read_only = frozenset(_norm(name) for name in inputs.pruning.read_only_tools)
    keeps: dict[int, float] = {}
    for root in region:
        if index.parent[root] != root:
            continue  # not a tool unit
        members = index.unit_members(root)
        gate = _gate(inputs, members, final, read_only)
        if gate is not None:
            _count(gates, gate)
            continue
        keeps[root] = max(final[p].keep_probability for p in members if p in final)
    return keeps


def _ranges(region: list[int], chosen: set[int], units: list[int]) -> list[list[int]]:
    """Adjacent chosen units merged into ranges; ranges hold whole units, so cuts stay balanced."""
    ranges: list[list[int]] = []
    previous_index = -2
    position_in_units = {root: i for i, root in enumerate(units)}
    for root in region:
        if root not in chosen:
            continue
        where = position_in_units[root]
        if ranges and where == previous_index + 1:
            ranges[-1].append(root)
        else:
            ranges.append([root])
        previous_index = where
    return ranges


def make_receipts(
    inputs: PlanInputs,
    decisions: Decisions,
    region: list[int],
    *,
    units: list[int],
    verdicts: Verdicts,
    need: int,
    gates: dict[str, int],
    receipt_ids: list[str],
    compaction_id: str,
) -> int:
    """Receipt the least needed ranges of ``region`` until ``need`` tokens are saved; the tokens saved
    (0 in a dry run, which records what it would receipt but keeps nothing)."""
    pruning = inputs.pruning
    index = inputs.index
    keeps = _keeps(inputs, region, verdicts, gates)
    if not keeps:
        return 0
    ordered = sorted(keeps.values())
    threshold = ordered[int(pruning.receipt_keep_quantile * (len(ordered) - 1))]
    chosen = {root for root, keep in keeps.items() if keep <= threshold}
    _count(gates, "keep-above-quantile", len(keeps) - len(chosen))
    saved = 0
    made = 0
    for roots in _ranges(region, chosen, units):
        if saved >= need:
            break
        if made >= pruning.receipt_max_per_pass:
            _count(gates, "max-per-pass")
            continue
        positions = tuple(p for root in roots for p in index.unit_members(root))
        chars = sum(
            len(b.content) for p in positions for b in index.view[p].blocks if type(b) is ToolResultBlock
        )
        if chars < pruning.receipt_min_range_chars:
            _count(gates, "range-too-small")
            continue
        receipt = build_receipt(inputs, roots, positions, compaction_id)
        span_tokens = sum(decisions.unit_tokens[root] for root in roots)
        if receipt.tokens > pruning.receipt_max_ratio * span_tokens:
            _count(gates, "receipt-too-large")
            continue
        made += 1
        saved += span_tokens - receipt.tokens
        receipt_ids.append(receipt.message.id)
        if not pruning.dry_run:
            _keep(decisions, receipt)
    return 0 if pruning.dry_run else saved


def _keep(decisions: Decisions, receipt: Receipt) -> None:
    """Record ``receipt``: its units cost the receipt's tokens (in the first unit) and nothing else."""
    key = receipt.roots[0]
    decisions.receipts[key] = receipt
    for root in receipt.roots:
        decisions.receipt_of[root] = key
        decisions.unit_tokens[root] = receipt.tokens if root == key else 0
    for position in receipt.positions:
        decisions.trims.pop(position, None)


def _calls_and_notes(index: HistoryIndex, positions: tuple[int, ...]) -> tuple[list[ReceiptCall], list[str]]:
    """What a receipt names: each call with its output size, error and result text, and the assistant's
    notes. A call no result answers is named as interrupted."""
    outputs: dict[str, tuple[int, bool, str]] = {}
    for position in positions:
        for block in index.view[position].blocks:
            if type(block) is ToolResultBlock:
                chars, error, text = outputs.get(block.tool_call_id, (0, False, ""))
                outputs[block.tool_call_id] = (
                    chars + len(block.content),
                    error or block.is_error,
                    text + block.content if text else block.content,
                )
    calls: list[ReceiptCall] = []
    notes: list[str] = []
    for position in positions:
        message = index.view[position]
        for block in message.blocks:
            if type(block) is ToolCallBlock:
                found = outputs.get(block.id)
                chars, error, text = found if found is not None else (0, False, "")
                arguments = block.arguments if isinstance(block.arguments, dict) else {}
                calls.append(
                    ReceiptCall(
                        tool_name=block.name,
                        arguments=arguments,
                        output_chars=chars,
                        is_error=error,
                        result=text,
                        interrupted=found is None,
                    )
                )
            elif type(block) is TextBlock and message.role == "assistant":
                notes.append(block.text)
    return calls, notes


def build_receipt(
    inputs: PlanInputs, roots: list[int], positions: tuple[int, ...], compaction_id: str
) -> Receipt:
    """The receipt message of the units rooted at ``roots`` (members ``positions``)."""
    index = inputs.index
    source = inputs.messages
    original_ids = tuple(source[p].id for p in positions)
    receipt_id = "ds4-receipt:" + hash16(*original_ids)
    calls, notes = _calls_and_notes(index, positions)
    text = build_receipt_text(
        receipt_id=receipt_id,
        first_message_id=original_ids[0],
        last_message_id=original_ids[-1],
        message_count=len(positions),
        calls=calls,
        assistant_notes=" ".join(notes),
        note_chars=inputs.pruning.receipt_note_chars,
        restore_tool=inputs.pruning.restore_tool,
    )
    first = source[positions[0]]
    message = CanonicalMessage(
        id=receipt_id,
        source_entry_id=receipt_id,
        role="assistant",
        blocks=(TextBlock(text=text),),
        provenance=Provenance(
            source=first.provenance.source,
            session_id=first.provenance.session_id,
            entry_id=receipt_id,
            runtime_id=first.provenance.runtime_id,
        ),
        # A receipt of anything local-only stays local-only: privacy markers never downgrade.
        flags=MessageFlags(
            synthetic=True,
            local_only=True if any(source[p].flags.local_only for p in positions) else None,
        ),
    )
    return Receipt(
        roots=tuple(roots),
        positions=positions,
        message=message,
        tokens=inputs.estimator(message),
        original_tokens=sum(index.tokens[p] for p in positions),
        compaction_id=compaction_id,
    )


def receipt_records(
    decisions: Decisions, messages: tuple[CanonicalMessage, ...]
) -> tuple[ReceiptRecord, ...]:
    """The manifest's record of every receipt the plan sends, oldest first."""
    return tuple(
        ReceiptRecord(
            receipt_id=receipt.message.id,
            compaction_id=receipt.compaction_id,
            original_message_ids=tuple(messages[p].id for p in receipt.positions),
            original_tokens=receipt.original_tokens,
            receipt_tokens=receipt.tokens,
        )
        for _, receipt in sorted(decisions.receipts.items())
    )
