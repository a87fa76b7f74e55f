"""Rendering command results: plain text for a host's slash command, rich tables for the CLI, JSON.

The renderers are generic over the result structs: scalar fields become ``key: value`` lines (or a
two-column table), tuples of records become tables, mappings become ``key=value`` lines. In the text view
a record with a ``text_line`` property is that line.
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Any, Final

import msgspec

if TYPE_CHECKING:
    from rich.console import RenderableType

__all__ = ["render_json", "render_rich", "render_text"]

# Fields too large or too raw for the text and table views; ``--json`` shows them.
_JSON_ONLY_FIELDS: Final = frozenset({"manifest"})
_CELL_CHARS: Final = 96


def _fields(result: msgspec.Struct) -> list[tuple[str, Any]]:
    return [
        (name, getattr(result, name)) for name in result.__struct_fields__ if name not in _JSON_ONLY_FIELDS
    ]


def _is_record_tuple(value: Any) -> bool:
    return (
        isinstance(value, tuple) and bool(value) and all(isinstance(item, msgspec.Struct) for item in value)
    )


def _scalar(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}"  # as plan's tables print them: one way to write a number across commands
    if isinstance(value, float):
        return f"{value:.3g}"
    if isinstance(value, tuple):
        return ", ".join(_scalar(item) for item in value) if value else "-"
    text = str(value)
    single_line = text.replace("\n", " | ")
    return single_line if len(single_line) <= _CELL_CHARS else single_line[: _CELL_CHARS - 3] + "..."


def _flatten(prefix: str, value: Any, out: list[tuple[str, str]]) -> None:
    if isinstance(value, dict):
        for key in sorted(value):
            _flatten(f"{prefix}.{key}" if prefix else str(key), value[key], out)
    elif isinstance(value, msgspec.Struct):
        _flatten(prefix, msgspec.to_builtins(value), out)
    else:
        out.append((prefix, _scalar(tuple(value) if isinstance(value, list) else value)))


def render_text(result: msgspec.Struct) -> str:
    """Plain text for a host's ``/context`` slash command (no colour, no box drawing)."""
    command = getattr(result, "command", type(result).__name__)
    lines = [f"/context {command}"]
    for name, value in _fields(result):
        if name == "command":
            continue
        label = name.replace("_", " ")
        if _is_record_tuple(value):
            lines.append(f"{label}:")
            for record in value:
                # a record type may say how it reads as one line; otherwise its fields as key=value
                line = getattr(record, "text_line", None)
                if not isinstance(line, str):
                    line = "  ".join(f"{field}={_scalar(item)}" for field, item in _fields(record))
                lines.append("  " + line)
        elif isinstance(value, dict | msgspec.Struct):
            flat: list[tuple[str, str]] = []
            _flatten("", value, flat)
            lines.append(f"{label}:" + ("" if flat else " -"))
            lines.extend(f"  {key} = {text}" for key, text in flat)
        elif (
            isinstance(value, tuple)
            and value
            and all(isinstance(item, str) for item in value)
            and len(value) > 3
        ):
            lines.append(f"{label}:")
            lines.extend(f"  {_scalar(item)}" for item in value)
        else:
            lines.append(f"{label}: {_scalar(value)}")
    return "\n".join(lines)


def _distinct_parts(ids: list[str]) -> list[str]:
    """The ids of one column without the ``prefix:`` most of them share (the session id, mostly).

    At 80 columns a full ``session:entry`` id is folded over lines where the entry part, the one that
    tells rows apart, should be; the entry part is also what ``restore`` and ``explain`` accept. An id
    with another prefix (a supplement's) is shown whole.
    """
    parts = [text.rpartition(":") for text in ids]
    prefixes = Counter(prefix for prefix, _, _ in parts)
    shared, count = prefixes.most_common(1)[0] if prefixes else ("", 0)
    if not shared or count < 2:
        return ids
    return [entry if prefix == shared else text for text, (prefix, _, entry) in zip(ids, parts, strict=True)]


def render_rich(result: msgspec.Struct) -> RenderableType:
    """Rich tables for the CLI: one key/value table, then one table per list of records."""
    # rich is imported here, not at the top: ``--json`` and a host's text view never load it
    from rich.console import Group  # noqa: PLC0415
    from rich.markup import escape  # noqa: PLC0415
    from rich.table import Table  # noqa: PLC0415

    command = getattr(result, "command", type(result).__name__)
    summary = Table(title=f"/context {command}", show_header=False, title_justify="left")
    summary.add_column("field", style="bold", overflow="fold")
    summary.add_column("value", overflow="fold")
    tables: list[RenderableType] = [summary]
    for name, value in _fields(result):
        if name == "command":
            continue
        label = name.replace("_", " ")
        if _is_record_tuple(value):
            columns = [field for field, _ in _fields(value[0])]
            table = Table(title=label, title_justify="left")
            shown: list[list[str]] = []
            for column in columns:
                cells = [getattr(record, column) for record in value]
                texts = [_scalar(cell) for cell in cells]
                if column.endswith("_id"):
                    texts = _distinct_parts(texts)
                shown.append(texts)
                if all(isinstance(cell, int) and not isinstance(cell, bool) for cell in cells):
                    # a number is never cut ("184,…" tells nothing): its column keeps its width
                    table.add_column(column.replace("_", " "), min_width=max(map(len, texts)))
                    continue
                # nothing is cut at any width: a long id or name folds onto a second line, whole
                table.add_column(column.replace("_", " "), overflow="fold")
            for row in zip(*shown, strict=True):
                table.add_row(*(escape(text) for text in row))
            tables.append(table)
        elif isinstance(value, dict | msgspec.Struct):
            flat: list[tuple[str, str]] = []
            _flatten("", value, flat)
            for key, text in flat:
                summary.add_row(escape(f"{label}.{key}"), escape(text))
        else:
            summary.add_row(label, escape(_scalar(value)))
    return Group(*tables)


def json_data(value: Any) -> Any:
    """``value`` as JSON-ready builtins in the CLI's one convention.

    Every struct becomes an object keyed by its Python field names (snake_case, also for core's structs
    that encode themselves in camelCase) with every field present: an empty list stays ``[]`` and an
    unset value is ``null``, so a reader never has to guess whether a key was left out.
    """
    if isinstance(value, msgspec.Struct):
        data = {name: json_data(getattr(value, name)) for name in value.__struct_fields__}
        config = value.__struct_config__
        if config.tag_field is not None:
            data[config.tag_field] = config.tag  # a tagged union member says which one it is
        return data
    if isinstance(value, dict):
        return {str(key): json_data(item) for key, item in value.items()}
    if isinstance(value, list | tuple | frozenset | set):
        items = [json_data(item) for item in value]
        return sorted(items, key=repr) if isinstance(value, frozenset | set) else items
    return msgspec.to_builtins(value)


def render_json(result: msgspec.Struct) -> str:
    """Deterministic JSON (sorted keys) of the whole result, ``--json`` style (see :func:`json_data`)."""
    return msgspec.json.encode(json_data(result), order="sorted").decode()
