"""Pruning policy: layer 1 judged trimming of old tool results, layer 2 deterministic receipts.

The planner applies both inside a compaction (see ``ds4_context_core.planner``); this module holds the
pieces a host may want on their own: the :class:`Judge` protocol and its deterministic local default,
the evidence guard, the head/tail trim, the receipt text, and the task digest (``build_task_digest``,
``TaskDigestBuilder``) that the planner places in front of a cut history (``planner.task_digest``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._exports import adopt_public_names
from ._planner._digest import (
    MAX_DIGEST_ENTRIES,
    TASK_DIGEST_HEADER,
    TaskDigestBuilder,
    build_task_digest,
    is_host_command,
)
from ._planner._digest_stage import TASK_DIGEST_ITEM_ID
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
from ._planner._receipt_text import TOOL_KINDS, tool_kind

if TYPE_CHECKING:
    from .config import PruningConfig

__all__ = [
    "JUDGE_REASONS",
    "MAX_DIGEST_ENTRIES",
    "PRUNING_GATES",
    "RECEIPT_HEADER",
    "TASK_DIGEST_HEADER",
    "TASK_DIGEST_ITEM_ID",
    "TOOL_KINDS",
    "TRIM_MARKER_PREFIX",
    "DefaultJudge",
    "Judge",
    "JudgeCandidate",
    "PruningConfig",
    "ReceiptCall",
    "TaskDigestBuilder",
    "Verdict",
    "build_receipt_text",
    "build_task_digest",
    "call_path",
    "contains_evidence",
    "identifying_arguments",
    "is_host_command",
    "normalize_tool_name",
    "tool_kind",
    "trim_text",
]

adopt_public_names(__name__, globals())


def __getattr__(name: str) -> Any:
    # the pydantic section of the configuration, imported when it is first named: the digest and the
    # judge (which the engine uses on every plan) need no pydantic
    if name != "PruningConfig":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from .config import PruningConfig  # noqa: PLC0415

    globals()[name] = PruningConfig
    return PruningConfig
