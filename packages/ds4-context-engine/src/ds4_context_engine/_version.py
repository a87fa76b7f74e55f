"""The release version, shared in lockstep by all three ds4-context distributions."""

__version__ = "0.1.0"
