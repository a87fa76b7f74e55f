"""ds4-context-reference-adapter: an append-only JSONL runtime implementing runtime-adapter-v1."""

from ._version import __version__

__all__ = ["__version__"]
