"""No engine module outside ``pi/`` reads the fields of a Pi entry: the Pi format has one home.

The views, the calibration and the tool lifecycle store used to read ``entry.data[...]`` themselves; a
change to the session layout then had to be found in four folders. The check walks the syntax tree of
every engine module outside ``pi/`` and reports each place that reads an entry's raw ``data``, tests an
entry's ``type`` against a Pi entry type, reads a field only Pi entries and messages have, or lays out a
``custom`` entry by hand. It is shown to flag the code that was moved, so it cannot pass by seeing nothing.
"""

from __future__ import annotations

import ast
import itertools
from pathlib import Path

import pytest

import ds4_context_engine
from ds4_context_engine.pi import KNOWN_PI_ENTRY_TYPES

ENGINE = Path(ds4_context_engine.__file__).parent
PI_PACKAGE = "ds4_context_engine.pi"
# Field names of Pi entries and messages (camelCase, as Pi writes them) that nothing else we read uses.
PI_FIELDS = frozenset(
    {
        "customType",
        "firstKeptEntryId",
        "tokensBefore",
        "fromId",
        "parentId",
        "stopReason",
        "cacheRead",
        "cacheWrite",
        "totalTokens",
        "thinkingLevel",
        "modelId",
    }
)
ENTRY_TYPES = frozenset(KNOWN_PI_ENTRY_TYPES)


def _imports_pi(tree: ast.Module) -> bool:
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(PI_PACKAGE):
            return True
        if isinstance(node, ast.Import) and any(alias.name.startswith(PI_PACKAGE) for alias in node.names):
            return True
    return False


def _key(node: ast.expr) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def _is_type_attribute(node: ast.expr) -> bool:
    return isinstance(node, ast.Attribute) and node.attr == "type"


def _names_entry_type(node: ast.expr) -> bool:
    """A Pi entry type literal, or a literal collection holding one."""
    if isinstance(node, ast.Set | ast.Tuple | ast.List):
        return any(_key(item) in ENTRY_TYPES for item in node.elts)
    return _key(node) in ENTRY_TYPES


def _entry_type_test(node: ast.Compare) -> bool:
    operands = [node.left, *node.comparators]
    for (left, right), op in zip(itertools.pairwise(operands), node.ops, strict=True):
        membership = isinstance(op, ast.In | ast.NotIn)
        if not membership and not isinstance(op, ast.Eq | ast.NotEq):
            continue
        if _is_type_attribute(left) and (membership or _names_entry_type(right)):
            return True
        if _is_type_attribute(right) and _names_entry_type(left):
            return True
    return False


def _get_key(node: ast.AST) -> ast.expr | None:
    """The first argument of a ``.get(...)`` call."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get":
        return node.args[0] if node.args else None
    return None


def _entry_rule(node: ast.AST) -> str | None:
    """What ``node`` does with a Pi entry's own fields (only asked in modules that import pi/)."""
    if isinstance(node, ast.Attribute) and node.attr == "data":
        return "entry-data"
    if isinstance(node, ast.Compare) and _entry_type_test(node):
        return "entry-type"
    key = _get_key(node)
    if key is not None and _is_type_attribute(key):
        return "entry-type"
    return None


def _field_rule(node: ast.AST) -> str | None:
    """Whether ``node`` reads a field only Pi writes, or lays out a custom entry (asked everywhere)."""
    key = _get_key(node)
    if key is not None and _key(key) in PI_FIELDS:
        return "pi-field"
    if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load) and _key(node.slice) in PI_FIELDS:
        return "pi-field"
    if (
        isinstance(node, ast.Compare)
        and _key(node.left) in PI_FIELDS
        and any(isinstance(op, ast.In | ast.NotIn) for op in node.ops)
    ):
        return "pi-field"
    if isinstance(node, ast.Dict) and any(key is not None and _key(key) == "customType" for key in node.keys):
        return "custom-entry-layout"
    return None


def pi_field_reads(source: str) -> list[tuple[int, str]]:
    """(line, rule) for every place ``source`` handles the Pi entry layout itself."""
    tree = ast.parse(source)
    reads_entries = _imports_pi(tree)
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        rule = (_entry_rule(node) if reads_entries else None) or _field_rule(node)
        if rule is not None:
            found.append((getattr(node, "lineno", 0), rule))
    return sorted(found)


def _engine_modules() -> list[Path]:
    return sorted(path for path in ENGINE.rglob("*.py") if "pi" not in path.relative_to(ENGINE).parts[:1])


def test_no_module_outside_pi_reads_pi_entry_fields() -> None:
    findings = [
        f"{path.relative_to(ENGINE)}:{line}: {rule}"
        for path in _engine_modules()
        for line, rule in pi_field_reads(path.read_text(encoding="utf-8"))
    ]
    assert findings == []


def test_the_check_sees_the_modules_that_read_sessions() -> None:
    modules = {str(path.relative_to(ENGINE)) for path in _engine_modules()}
    assert not any(module.startswith("pi/") for module in modules)
    readers = {
        str(path.relative_to(ENGINE))
        for path in _engine_modules()
        if _imports_pi(ast.parse(path.read_text(encoding="utf-8")))
    }
    # the modules the Pi knowledge was moved out of still use pi/, so the entry rules apply to them
    assert {"commands/_views.py", "commands/_calibrate.py", "runtime/_tool_lifecycle.py"} <= readers
    assert {"commands/_workspace.py", "store/_sqlite.py", "store/_events.py"} <= readers


_IMPORT = "from ds4_context_engine.pi import PiEntry\n"


@pytest.mark.parametrize(
    ("moved_code", "rule"),
    [
        # commands/_views.py before the move
        ('first_kept = entry.data.get("firstKeptEntryId")', "entry-data"),
        (
            '_SUMMARY_KINDS = {"compaction": "compaction", "branch_summary": "branch-summary"}\n'
            "kind = _SUMMARY_KINDS.get(entry.type)",
            "entry-type",
        ),
        ('items = [entry for entry in session.entries if entry.type == "compaction"]', "entry-type"),
        ('if entry.type != "branch_summary" or not isinstance(from_id, str):\n    pass', "entry-type"),
        # commands/_calibrate.py before the move
        ('if message.get("stopReason") in _NO_SIGNAL_STOPS:\n    pass', "pi-field"),
        ('message = entry.data.get("message")', "entry-data"),
        # runtime/_tool_lifecycle.py before the move
        (
            'ok = entry.type == "custom" and entry.data.get("customType") == TOOL_LIFECYCLE_CUSTOM_TYPE',
            "entry-type",
        ),
        (
            'append_pi_entry(path, "custom", {"customType": TOOL_LIFECYCLE_CUSTOM_TYPE, "data": data})',
            "custom-entry-layout",
        ),
    ],
)
def test_the_check_flags_the_code_that_was_moved(moved_code: str, rule: str) -> None:
    assert rule in {found for _, found in pi_field_reads(_IMPORT + moved_code)}


def test_entry_rules_apply_only_where_pi_is_imported() -> None:
    # a provider's server-sent event has ``.data`` and ``.type`` too; without Pi imports they are not entries
    assert pi_field_reads('payload = event.data\nif item.type == "message":\n    pass') == []
    assert pi_field_reads(_IMPORT + "payload = event.data") == [(2, "entry-data")]
    # writing a demo message with Pi's field names is not reading an entry
    assert pi_field_reads(_IMPORT + 'message = {"stopReason": "stop", "totalTokens": 3}') == []
