"""Time in the contract's two forms: epoch milliseconds and canonical UTC instants."""

from __future__ import annotations

import time
from datetime import UTC, datetime


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def instant(ms: int) -> str:
    """`YYYY-MM-DDTHH:mm:ss.sssZ` for epoch milliseconds."""
    moment = datetime.fromtimestamp(ms / 1000, tz=UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms % 1000:03d}Z"


def parse_instant(text: str) -> int:
    moment = datetime.strptime(text, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC)
    return int(moment.timestamp() * 1000)
