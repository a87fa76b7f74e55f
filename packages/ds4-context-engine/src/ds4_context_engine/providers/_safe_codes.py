"""Which provider error codes may be passed on to a host (no HTTP client needed to ask)."""

from __future__ import annotations

import re
from typing import Final

__all__ = ["ERROR_TYPE_PATTERN"]

# A provider error code is passed on only when it reads like one (rate_limit_error, invalid_api_key):
# words of lower-case letters joined by "_", "." or "-". A server that echoes a key (mixed case, digits,
# long random runs) in its code field gets nothing passed on.
ERROR_TYPE_PATTERN: Final = re.compile(r"[a-z]{1,24}(?:[_.-][a-z]{1,24}){0,7}")
