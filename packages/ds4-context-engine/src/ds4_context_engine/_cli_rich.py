"""The rich names the CLI draws tables with, imported from rich when one is first made.

``ds4-context plan --json`` (and every other ``--json`` command) never draws a table, and importing
``rich.console`` and ``rich.table`` is about a tenth of such a command's start-up. So at run time
``Console``, ``Table`` and ``escape`` here are small functions that import rich on their first call and
return what rich's own would; type checkers see rich's classes themselves.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__all__ = ["Console", "Table", "escape"]

if TYPE_CHECKING:
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table
else:

    def Console(*args: Any, **kwargs: Any) -> Any:  # noqa: N802 - stands in for rich's class
        import rich.console  # noqa: PLC0415 - the point of this module

        return rich.console.Console(*args, **kwargs)

    def Table(*args: Any, **kwargs: Any) -> Any:  # noqa: N802 - stands in for rich's class
        import rich.table  # noqa: PLC0415

        return rich.table.Table(*args, **kwargs)

    def escape(markup: str, *args: Any, **kwargs: Any) -> str:
        import rich.markup  # noqa: PLC0415

        return rich.markup.escape(markup, *args, **kwargs)
