"""ds4-context-engine: Pi-style host integration and the ``ds4-context`` CLI."""

from ._version import __version__

__all__ = ["__version__"]
