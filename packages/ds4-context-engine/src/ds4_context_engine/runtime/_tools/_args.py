"""The arguments of each managed tool, as msgspec Structs: one definition gives both the JSON Schema the
model is shown and the strict check its calls go through (unknown fields, wrong types and out-of-range
numbers are refused, never coerced)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, TypeVar

import msgspec

from ds4_context_core import Ds4ContextError

__all__ = [
    "BashArgs",
    "EditArgs",
    "GlobArgs",
    "GrepArgs",
    "ReadArgs",
    "WriteArgs",
    "decode_arguments",
    "parameters_schema",
]

_Args = TypeVar("_Args", bound=msgspec.Struct)

_Path = Annotated[
    str,
    msgspec.Meta(
        min_length=1,
        max_length=4096,
        description="File path, absolute or relative to the working directory; must lie inside the roots.",
    ),
]
_DirPath = Annotated[
    str,
    msgspec.Meta(
        min_length=1,
        max_length=4096,
        description="Directory (or, for Grep, file) to search; defaults to the working directory.",
    ),
]


class ReadArgs(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    path: _Path
    offset: Annotated[int, msgspec.Meta(ge=1, description="First line to return (1-based).")] = 1
    limit: Annotated[int, msgspec.Meta(ge=1, description="How many lines to return at most.")] | None = None


class WriteArgs(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    path: _Path
    content: Annotated[str, msgspec.Meta(description="The whole new content of the file.")]


class EditArgs(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    path: _Path
    old_string: Annotated[
        str, msgspec.Meta(min_length=1, description="Exact text to replace; must occur exactly once.")
    ]
    new_string: Annotated[str, msgspec.Meta(description="The replacement text.")]
    replace_all: Annotated[
        bool, msgspec.Meta(description="Replace every occurrence instead of requiring a unique one.")
    ] = False


class GlobArgs(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    pattern: Annotated[
        str,
        msgspec.Meta(
            min_length=1,
            max_length=1024,
            description="Glob relative to `path`: `*` and `?` stay in one name, `**` crosses directories, "
            "`{a,b}` lists alternatives (for example `src/**/*.{py,md}`).",
        ),
    ]
    path: _DirPath | None = None


class GrepArgs(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    pattern: Annotated[str, msgspec.Meta(min_length=1, description="Regular expression (Python syntax).")]
    path: _DirPath | None = None
    glob: (
        Annotated[
            str,
            msgspec.Meta(
                min_length=1,
                max_length=1024,
                description="Only search files matching this glob (a name such as `*.py`, or a path glob).",
            ),
        ]
        | None
    ) = None
    case_insensitive: Annotated[bool, msgspec.Meta(description="Match ignoring case.")] = False
    max_results: Annotated[int, msgspec.Meta(ge=1, description="Show at most this many lines.")] | None = None


class BashArgs(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    command: Annotated[
        str, msgspec.Meta(min_length=1, max_length=65536, description="Shell command run with bash -c.")
    ]
    timeout: (
        Annotated[float, msgspec.Meta(gt=0, description="Seconds before the command is killed.")] | None
    ) = None
    description: (
        Annotated[str, msgspec.Meta(max_length=200, description="A few words on what the command does.")]
        | None
    ) = None


def parameters_schema(args_type: type[msgspec.Struct]) -> dict[str, Any]:
    """The JSON Schema object for ``args_type`` without the ``$defs`` wrapper msgspec puts around it."""
    schema = msgspec.json.schema(args_type)
    body = dict(schema["$defs"][args_type.__name__])
    body.pop("title", None)
    properties: dict[str, Any] = {}
    for name, declared in body.get("properties", {}).items():
        prop = declared
        # An optional field is `anyOf: [{...}, {"type": "null"}]`; models read a top-level description
        # and type better, and leaving the field out already means "the default".
        options = prop.get("anyOf")
        if isinstance(options, list) and len(options) == 2 and {"type": "null"} in options:
            merged = dict(next(option for option in options if option != {"type": "null"}))
            if "default" in prop and prop["default"] is not None:
                merged["default"] = prop["default"]
            prop = merged
        properties[name] = prop
    body["properties"] = properties
    return body


def decode_arguments(arguments: object, args_type: type[_Args]) -> _Args:
    """Strictly convert a call's arguments; a JSON text is decoded first. Raises ``tool-invalid-arguments``.

    msgspec's messages name the field and the expected type, never the value that was sent.
    """
    if isinstance(arguments, str | bytes):
        try:
            arguments = msgspec.json.decode(arguments)
        except msgspec.DecodeError:
            raise Ds4ContextError("tool-invalid-arguments", "the arguments are not valid JSON") from None
    if not isinstance(arguments, Mapping):
        raise Ds4ContextError("tool-invalid-arguments", "the arguments must be a JSON object")
    try:
        return msgspec.convert(dict(arguments), args_type, strict=True)
    except msgspec.ValidationError as error:
        raise Ds4ContextError("tool-invalid-arguments", f"invalid arguments: {error}") from None
