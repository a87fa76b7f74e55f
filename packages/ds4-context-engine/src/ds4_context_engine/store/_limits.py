"""Retention and size limits both backends share, in a module of their own so that reading them (the
commands do) does not import SQLite or psycopg."""

from __future__ import annotations

from typing import Final

__all__ = [
    "ARTIFACT_THRESHOLD_CHARS",
    "CALIBRATION_RETENTION",
    "CALIBRATION_SOURCE_RETENTION",
    "MANIFEST_RETENTION",
    "SUMMARY_RETENTION",
]

MANIFEST_RETENTION: Final = 128
SUMMARY_RETENTION: Final = 64
CALIBRATION_RETENTION: Final = 200
CALIBRATION_SOURCE_RETENTION: Final = 10 * CALIBRATION_RETENTION
ARTIFACT_THRESHOLD_CHARS: Final = 16_384
