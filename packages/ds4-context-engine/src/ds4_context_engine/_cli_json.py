"""What ``ds4-context <command> --json`` prints: one typed output per command, and its JSON Schema.

The outputs follow one convention (see :func:`ds4_context_engine.commands._render.json_data`): snake_case
field names, every field present, a ``command`` key. The schema of each output is derived from its type
here, so the schemas in ``docs/engine/json-schemas/`` cannot drift from what the CLI prints (a test
regenerates and compares them, and validates real outputs against them).
"""

from __future__ import annotations

import json
import sys
import typing
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import msgspec
import msgspec.inspect as mi

from ds4_context_core.planner import PlanBudget, PlanItem, PlanManifest

if TYPE_CHECKING:
    from ds4_context_core.conformance import ConformanceReport

    from .commands import RestoreResult
    from .runtime import FailoverRecord, RunStep, RunToolRecord
    from .store import IndexReport

__all__ = [
    "DemoOutput",
    "IndexOutput",
    "PlanOutput",
    "RunOutput",
    "command_output_types",
    "json_schema",
    "write_schemas",
]

SCHEMA_DIALECT: Final = "https://json-schema.org/draft/2020-12/schema"


class PlanOutput(msgspec.Struct, frozen=True, kw_only=True):
    """``plan --json``: the model planned for, the manifest, the budget and every item (receipts too)."""

    model: str | None
    manifest: PlanManifest
    budget: PlanBudget
    items: tuple[PlanItem, ...]


class IndexOutput(msgspec.Struct, frozen=True, kw_only=True):
    """``index --json``: one report per session file, in the order given."""

    reports: tuple[IndexReport, ...]


class DemoOutput(msgspec.Struct, frozen=True, kw_only=True):
    """``demo --json``: where the files were, the plan, what was restored and the conformance report.

    ``next_commands`` are the shell commands that show the same plan and restore again (as the text demo
    prints them), each a string ready for a POSIX shell; empty without ``--keep``, as the files are gone.
    """

    directory: str
    kept: bool
    session: str
    manifest: PlanManifest
    items: tuple[PlanItem, ...]
    restored: RestoreResult | None
    conformance: ConformanceReport
    next_commands: tuple[str, ...]


class RunOutput(msgspec.Struct, frozen=True, kw_only=True):
    """``run --json``: the answer, the route and usage per step, the tool calls and every failover."""

    model: str
    text: str
    error: str | None
    error_detail: str | None
    steps: tuple[RunStep, ...]
    tool_records: tuple[RunToolRecord, ...]
    failovers: tuple[FailoverRecord, ...]
    messages: int
    session_entry_ids: tuple[str, ...]


def _import_field_types() -> None:
    """Put the types the outputs' annotations name into this module, where msgspec resolves them.

    ``plan --json`` prints a :class:`PlanOutput` (encoding needs no annotations), so the conformance kit,
    the runtime and the store are imported only for the schemas, or by the commands that print them.
    """
    from ds4_context_core.conformance import ConformanceReport  # noqa: PLC0415

    from .commands import RestoreResult  # noqa: PLC0415
    from .runtime import FailoverRecord, RunStep, RunToolRecord  # noqa: PLC0415
    from .store import IndexReport  # noqa: PLC0415

    globals().update(
        ConformanceReport=ConformanceReport,
        FailoverRecord=FailoverRecord,
        IndexReport=IndexReport,
        RestoreResult=RestoreResult,
        RunStep=RunStep,
        RunToolRecord=RunToolRecord,
    )


def _context_command_types() -> dict[str, type]:
    """The ``/context`` commands the CLI runs, with the result type their function returns."""
    from . import commands  # noqa: PLC0415 - the dispatcher is lazy; this is only for schemas

    found: dict[str, type] = {}
    for name in commands.CONTEXT_COMMANDS:
        function: Callable[..., Any] = getattr(commands, "context_" + name.replace("-", "_"))
        found[name] = typing.get_type_hints(function)["return"]
    return found


def command_output_types() -> dict[str, type]:
    """Every command with a ``--json`` output, by the ``command`` key it prints."""
    _import_field_types()
    return {
        **_context_command_types(),
        "conformance": ConformanceReport,
        "demo": DemoOutput,
        "index": IndexOutput,
        "plan": PlanOutput,
        "run": RunOutput,
    }


def _schema(info: mi.Type, definitions: dict[str, Any]) -> dict[str, Any]:
    if isinstance(info, mi.StructType):
        return _struct(info, definitions)
    if isinstance(info, mi.UnionType):
        return {"anyOf": [_schema(member, definitions) for member in info.types]}
    if isinstance(info, mi.ListType | mi.VarTupleType | mi.SetType | mi.FrozenSetType):
        return {"type": "array", "items": _schema(info.item_type, definitions)}
    if isinstance(info, mi.TupleType):
        items = [_schema(item, definitions) for item in info.item_types]
        return {"type": "array", "prefixItems": items, "minItems": len(items), "maxItems": len(items)}
    if isinstance(info, mi.DictType):
        return {"type": "object", "additionalProperties": _schema(info.value_type, definitions)}
    if isinstance(info, mi.LiteralType):
        return {"enum": list(info.values)}
    return _simple(info)


_SIMPLE: Final[tuple[tuple[type, dict[str, str]], ...]] = (
    (mi.StrType, {"type": "string"}),
    (mi.IntType, {"type": "integer"}),
    (mi.FloatType, {"type": "number"}),
    (mi.BoolType, {"type": "boolean"}),
    (mi.NoneType, {"type": "null"}),
    (mi.AnyType, {}),
)


def _simple(info: object) -> dict[str, Any]:
    for kind, schema in _SIMPLE:
        if isinstance(info, kind):
            return dict(schema)
    raise TypeError(f"no JSON Schema for {type(info).__name__}")


def _struct(info: mi.StructType, definitions: dict[str, Any]) -> dict[str, Any]:
    name = info.cls.__name__
    if name not in definitions:
        definitions[name] = {}  # a placeholder first, for structs that contain themselves
        properties = {field.name: _schema(field.type, definitions) for field in info.fields}
        if info.tag_field is not None:
            properties[info.tag_field] = {"const": info.tag}
        definitions[name] = {
            "type": "object",
            "properties": properties,
            "required": sorted(properties),
            "additionalProperties": False,
        }
    return {"$ref": f"#/$defs/{name}"}


def json_schema(command: str, output: type) -> dict[str, Any]:
    """The JSON Schema (2020-12) of ``command``'s ``--json`` output, whose type is ``output``."""
    _import_field_types()
    definitions: dict[str, Any] = {}
    info = mi.type_info(output)
    if not isinstance(info, mi.StructType):
        raise TypeError(f"{command}: an output is a struct")
    root = _struct(info, definitions)
    body = definitions.pop(root["$ref"].rsplit("/", 1)[1])
    body["properties"]["command"] = {"const": command}
    body["required"] = sorted(body["properties"])
    return {
        "$schema": SCHEMA_DIALECT,
        "$id": f"ds4-context-cli-{command}.schema.json",
        "title": f"ds4-context {command} --json",
        **body,
        "$defs": dict(sorted(definitions.items())),
    }


def write_schemas(directory: Path) -> list[Path]:
    """Write ``<command>.schema.json`` for every command into ``directory``; the paths written."""
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for command, output in sorted(command_output_types().items()):
        path = directory / f"{command}.schema.json"
        path.write_text(json.dumps(json_schema(command, output), indent=2) + "\n", encoding="utf-8")
        written.append(path)
    return written


if __name__ == "__main__":
    # python -m ds4_context_engine._cli_json docs/engine/json-schemas
    for written_path in write_schemas(Path(sys.argv[1])):
        print(written_path)
