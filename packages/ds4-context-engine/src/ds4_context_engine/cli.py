"""The ``ds4-context`` command line."""

from __future__ import annotations

import typer

from ._version import __version__

__all__ = ["app", "main"]

app = typer.Typer(name="ds4-context", no_args_is_help=True, add_completion=False)


@app.command()
def version() -> None:
    """Print the installed ds4-context version."""
    typer.echo(__version__)


@app.callback()
def _root() -> None:
    """Context management for agent hosts."""


def main() -> None:
    """Console entry point."""
    app()
