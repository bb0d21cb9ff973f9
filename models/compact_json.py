"""Compact JSON bytes on the hot path, written by orjson.

Why: every search writes its page's envelope as JSON twice (the packet budget, then the
answer), and every admitted record packs its sealed body and its journal event; the
standard library's json writes them several times slower than orjson
(docs/results/mcp-path.md). A value orjson does not write (a numpy scalar,
an integer past 64 bits) is written by the standard library instead, as it was before,
so no caller meets a new refusal.
"""

from __future__ import annotations

import json
from typing import Any

import orjson


def dumps(value: Any, *, sort_keys: bool = False) -> bytes:
    """``value`` as compact UTF-8 JSON (non-ASCII written as is), keys sorted if asked."""
    option = orjson.OPT_NON_STR_KEYS | (orjson.OPT_SORT_KEYS if sort_keys else 0)
    try:
        return orjson.dumps(value, option=option)
    except TypeError:  # orjson.JSONEncodeError
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"), sort_keys=sort_keys).encode("utf-8")
