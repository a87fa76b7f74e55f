"""Pruning policy: layer 1 judged trimming of old tool results, layer 2 deterministic receipts.

The planner applies both inside a compaction (see ``ds4_context_core.planner``); this module holds the
pieces a host may want on their own: the :class:`Judge` protocol and its deterministic local default,
the evidence guard, the head/tail trim and the receipt text.
"""

from __future__ import annotations

from ._exports import adopt_public_names
from ._planner._index import call_path, normalize_tool_name
from ._planner._pruning import (
    JUDGE_REASONS,
    PRUNING_GATES,
    RECEIPT_HEADER,
    TRIM_MARKER_PREFIX,
    DefaultJudge,
    Judge,
    JudgeCandidate,
    ReceiptCall,
    Verdict,
    build_receipt_text,
    contains_evidence,
    identifying_arguments,
    trim_text,
)
from .config import PruningConfig

__all__ = [
    "JUDGE_REASONS",
    "PRUNING_GATES",
    "RECEIPT_HEADER",
    "TRIM_MARKER_PREFIX",
    "DefaultJudge",
    "Judge",
    "JudgeCandidate",
    "PruningConfig",
    "ReceiptCall",
    "Verdict",
    "build_receipt_text",
    "call_path",
    "contains_evidence",
    "identifying_arguments",
    "normalize_tool_name",
    "trim_text",
]

adopt_public_names(__name__, globals())
