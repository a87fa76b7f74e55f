"""The ``ds4-context`` command line: inspect, plan, index and restore Pi sessions; run the demo.

Every read command takes ``--json`` for machine-readable output. Errors print one line with a stable
code (``error [code]: ...``); the exit status says what kind of outcome it was (the ``EXIT_*``
constants). Nothing is ever printed from a session's content except by ``restore``, whose job it is.

``app`` (the typer application) is imported on first use: ``ds4-context version`` and ``--version``
answer without loading typer, rich, pydantic or the planner, and the plain command lines of ``plan`` and
the read commands are parsed without typer (:mod:`ds4_context_engine._cli_argv`), with the same output,
error codes and exit statuses.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any, Final

from ._version import __version__

if TYPE_CHECKING:
    import typer

    app: typer.Typer

__all__ = [
    "DEMO_WINDOW_TOKENS",
    "EXIT_ERROR",
    "EXIT_FAILED",
    "EXIT_FALLBACK",
    "EXIT_INTERNAL",
    "EXIT_USAGE",
    "app",
    "main",
]

EXIT_FAILED: Final = 1
"""``conformance`` ran and a case failed."""
EXIT_ERROR: Final = 2
"""The command line was fine, but a file, the store, the config or the environment refused (a coded error)."""
EXIT_FALLBACK: Final = 3
"""``plan`` printed its plan, but the planner fell back."""
EXIT_USAGE: Final = 64
"""The command line cannot work as written (``EX_USAGE`` of sysexits.h)."""
EXIT_INTERNAL: Final = 70
"""An exception no command expected (``EX_SOFTWARE``): one line naming its type, ``internal-error``."""
DEMO_WINDOW_TOKENS: Final = 20_000

_VERSION_ARGUMENTS: Final = (["version"], ["--version"])


def __getattr__(name: str) -> Any:
    if name != "app":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from ._cli_app import app as typer_app  # noqa: PLC0415 - the whole CLI, only when a command needs it

    globals()["app"] = typer_app
    return typer_app


def main() -> None:
    """Console entry point."""
    arguments = sys.argv[1:]
    if arguments in _VERSION_ARGUMENTS:
        sys.stdout.write(__version__ + "\n")
        return
    from ._cli_argv import run_fast  # noqa: PLC0415 - see the module docstring

    if run_fast(arguments):
        return
    from ._cli_app import app as typer_app  # noqa: PLC0415 - see the module docstring

    typer_app()
