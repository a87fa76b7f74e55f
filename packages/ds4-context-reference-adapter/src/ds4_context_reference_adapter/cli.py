"""The ``ds4-context-reference`` console command."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from ._version import __version__

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command; returns the process exit code."""
    parser = argparse.ArgumentParser(prog="ds4-context-reference", description=__doc__)
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    parser.parse_args(argv)
    parser.print_help(sys.stdout)
    return 0
