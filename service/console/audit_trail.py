"""The audit log as the console shows it: recent lines, filtered, and error rates.

Why a reader here: the audit log (one JSON line per tool call, written by the MCP front
end) already holds only ids, codes, timings and digests. The console reads the file's
tail (the recent calls an operator asks about), keeps only the fields below (so a
field added to the log later is not shown until it is listed here), filters by tool,
code, tenant and time, counts each error code per minute for the plot, and lists the
recent searches whose rank receipts the receipts page can show.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from engram.models.tools import SEARCH

#: The fields of a line the console shows (all identifiers, codes, timings, digests).
FIELDS = (
    "time",
    "auditId",
    "tool",
    "tenant",
    "workspace",
    "principal",
    "code",
    "arguments_digest",
    "response_digest",
    "receipt_digest",
    "latency_ms",
)
#: How much of the file's end is read: the recent calls.
TAIL_BYTES = 16 << 20
#: The code of a call that succeeded (not an error).
SUCCESS = "ok"
#: How many recent searches the receipts page offers.
RECENT_SEARCHES = 50


@dataclass(frozen=True)
class AuditFilter:
    """What the operator asked for; an empty field matches everything. Times are the
    log's own ISO 8601 UTC stamps (or a prefix of one), compared as text."""

    tool: str = ""
    code: str = ""
    tenant: str = ""
    since: str = ""
    until: str = ""

    def matches(self, line: dict[str, Any]) -> bool:
        stamp = str(line.get("time", ""))
        return (
            (not self.tool or line.get("tool") == self.tool)
            and (not self.code or line.get("code") == self.code)
            and (not self.tenant or line.get("tenant") == self.tenant)
            and (not self.since or stamp >= self.since)
            and (not self.until or stamp[: len(self.until)] <= self.until)
        )


def recent_lines(path: Path) -> list[dict[str, Any]]:
    """The lines in the file's last TAIL_BYTES, oldest first, reduced to FIELDS."""
    try:
        with open(path, "rb") as handle:
            size = handle.seek(0, os.SEEK_END)
            handle.seek(max(0, size - TAIL_BYTES))
            data = handle.read()
    except FileNotFoundError:
        return []
    if len(data) == TAIL_BYTES:
        data = data.split(b"\n", 1)[-1]  # a partial first line
    lines = []
    for raw in data.splitlines():
        try:
            line = orjson.loads(raw)
        except ValueError:
            continue  # a line cut by a crash mid-write
        if isinstance(line, dict):
            lines.append({name: line.get(name) for name in FIELDS})
    return lines


def audit(path: Path, wanted: AuditFilter, limit: int = 200) -> dict[str, Any]:
    """The newest ``limit`` matching lines, the choices of each filter, and the count of
    each error code per minute over every matching line read."""
    lines = recent_lines(path)
    matching = [line for line in lines if wanted.matches(line)]
    per_minute: dict[str, Counter[str]] = {}
    for line in matching:
        if line["code"] != SUCCESS:
            per_minute.setdefault(str(line["time"])[:16], Counter())[str(line["code"])] += 1
    codes = sorted({code for counts in per_minute.values() for code in counts})
    minutes = sorted(per_minute)
    return {
        "lines": matching[-limit:][::-1],
        "matched": len(matching),
        "read": len(lines),
        "choices": {
            name: sorted({str(line[name]) for line in lines if line[name] is not None})
            for name in ("tool", "code", "tenant")
        },
        "error_rate": {
            "minutes": minutes,
            "codes": {code: [per_minute[m][code] for m in minutes] for code in codes},
        },
    }


def recent_searches(path: Path, limit: int = RECENT_SEARCHES) -> list[dict[str, Any]]:
    """The newest ``limit`` searches that answered with a rank receipt, newest first.
    Read from the end back, parsing only the lines that name the search tool, so a
    page costs the searches it shows rather than the whole tail."""
    marker = json.dumps({"tool": SEARCH}, separators=(",", ":"))[1:-1].encode()
    found: list[dict[str, Any]] = []
    for raw in _newest_first(path):
        if marker not in raw:
            continue
        try:
            line = orjson.loads(raw)
        except ValueError:
            continue  # a line cut by a crash mid-write
        if isinstance(line, dict) and line.get("tool") == SEARCH and line.get("code") == SUCCESS:
            if line.get("receipt_digest"):
                found.append({name: line.get(name) for name in FIELDS})
                if len(found) == limit:
                    break
    return found


def _newest_first(path: Path, block: int = 1 << 18) -> Iterator[bytes]:
    """The whole lines of the file's last TAIL_BYTES, newest first, read in blocks."""
    try:
        handle = open(path, "rb")
    except FileNotFoundError:
        return
    with handle:
        end = handle.seek(0, os.SEEK_END)
        floor = max(0, end - TAIL_BYTES)
        position, rest = end, b""
        while position > floor:
            size = min(block, position - floor)
            position -= size
            handle.seek(position)
            lines = (handle.read(size) + rest).split(b"\n")
            rest = lines[0]
            yield from (raw for raw in reversed(lines[1:]) if raw)
        if rest and floor == 0:  # above the floor, the first line may be cut
            yield rest
