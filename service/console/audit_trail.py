"""The audit log as the console shows it: pages of lines, filtered, and error rates.

Why a reader here: the audit log (one JSON line per tool call, written by the MCP front
end) already holds only ids, codes, timings and digests. The console keeps only the
audit line's listed fields (`AUDIT_FIELDS`, the writer's own list, so a field added to
the log later is shown only once it is listed there), filters by tool, code, tenant
and time, counts each error code per minute for the plot, and lists the recent
searches whose rank receipts the receipts page can show.

Why a page's cost does not grow with the log: the file is read from its end back, in
blocks, only until one page of matching lines is found (or at most `SCAN_BYTES`, then
the page says where to read on); a line that cannot match (its tool, code or tenant
bytes absent) is skipped without being parsed. The log is appended in time order, so
a time filter is a bisection of the file to the byte offset where it starts and ends.
A page's cursor is such an offset: the start of the oldest line it read. The error
plot reads back from the newest line at most `RATE_MINUTES` of the log (and at most
`RATE_BYTES`), parsing only the lines whose code is not a success.
"""

from __future__ import annotations

import json
import os
import re
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from itertools import accumulate
from pathlib import Path
from typing import IO, Any

import orjson

from engram.models.codes import ErrorCode
from engram.models.tools import SEARCH, TOOLS
from engram.service.mcp.audit import AUDIT_FIELDS

#: Lines on one page.
PAGE = 100
#: The most a page reads looking for its lines (a rare filter's page may hold fewer).
SCAN_BYTES = 8 << 20
#: The span of the error plot, back from the newest line it covers.
RATE_MINUTES = 60
#: The most the error plot reads, however many calls its minutes hold.
RATE_BYTES = 16 << 20
#: Bytes read at a time, from the end back.
BLOCK = 1 << 18
#: The code of a call that succeeded (not an error).
SUCCESS = "ok"
#: How many recent searches the receipts page offers.
RECENT_SEARCHES = 50
#: A minute, as the prefix of an audit stamp (`2026-12-06T09:21`).
MINUTE = "%Y-%m-%dT%H:%M"
_MINUTE_LENGTH = len("2026-12-06T09:21")


def _written(name: str, value: str) -> bytes:
    """The bytes of ``"name":value`` as the audit writer writes them."""
    return json.dumps({name: value}, ensure_ascii=False, separators=(",", ":"))[1:-1].encode()


_CODE = b'"code":'
_SUCCEEDED = _written("code", SUCCESS)
_FAILED = re.compile(re.escape(_CODE) + rb'(?!"' + SUCCESS.encode() + rb'")')
_TIME = b'"time":"'


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

    def markers(self) -> list[bytes]:
        """Bytes that every matching line holds (the cheap test before parsing one)."""
        wanted = {"tool": self.tool, "code": self.code, "tenant": self.tenant}
        return [_written(name, value) for name, value in wanted.items() if value]

    def after_since(self, stamp: str) -> bool:
        return stamp >= self.since

    def after_until(self, stamp: str) -> bool:
        return stamp[: len(self.until)] > self.until


def audit(path: Path, wanted: AuditFilter, before: int | None = None, limit: int = PAGE) -> dict[str, Any]:
    """One page: the newest ``limit`` matching lines that start before byte offset
    ``before`` (None: the end), newest first; ``older``, the offset to read the next
    page from (None when the filter's range is read to its start); the choices of each
    filter (the code's are suggestions: a protocol error's line holds its JSON-RPC
    code); and each error code's calls per minute in the filter's newest hour."""
    view: dict[str, Any] = {
        "lines": [],
        "matched": 0,
        "read": 0,
        "older": None,
        "choices": {"tool": sorted(TOOLS), "code": [SUCCESS, *sorted(code.value for code in ErrorCode)]},
        "error_rate": {"minutes": [], "codes": {}},
    }
    try:
        handle = open(path, "rb")
    except FileNotFoundError:
        return view
    with handle:
        size = handle.seek(0, os.SEEK_END)
        end = _first_line(handle, size, wanted.after_until) if wanted.until else size
        floor = _first_line(handle, size, wanted.after_since) if wanted.since else 0
        view["error_rate"] = _error_rate(handle, end, floor, wanted)
        if before is not None:
            end = min(end, max(before, floor))
        view.update(_page(handle, end, floor, wanted, limit, wanted.matches))
    return view


def recent_searches(path: Path, limit: int = RECENT_SEARCHES) -> list[dict[str, Any]]:
    """The newest ``limit`` searches that answered with a rank receipt, newest first,
    from the log's last SCAN_BYTES."""
    wanted = AuditFilter(tool=SEARCH, code=SUCCESS)
    try:
        handle = open(path, "rb")
    except FileNotFoundError:
        return []
    with handle:
        size = handle.seek(0, os.SEEK_END)
        found = _page(
            handle, size, 0, wanted, limit, lambda line: wanted.matches(line) and bool(line["receipt_digest"])
        )
    lines: list[dict[str, Any]] = found["lines"]
    return lines


def _page(
    handle: IO[bytes], end: int, floor: int, wanted: AuditFilter, limit: int, accept: Callable[[dict[str, Any]], bool]
) -> dict[str, Any]:
    """The newest ``limit`` lines between ``floor`` and ``end`` that hold ``wanted``'s
    markers and that ``accept`` takes, reading at most SCAN_BYTES back from ``end``."""
    markers = wanted.markers()
    lowest = max(floor, end - SCAN_BYTES)
    lines: list[dict[str, Any]] = []
    read, oldest = 0, end
    for start, chunk in _chunks(handle, end, lowest):
        read, oldest = read + chunk.count(b"\n"), start
        for offset, raw in _holding(chunk, start, markers):
            line = _parsed(raw)
            if line is not None and accept(line):
                lines.append(line)
                if len(lines) == limit:
                    return {"lines": lines, "matched": limit, "read": read, "older": offset if offset > floor else None}
    more = lowest > floor and oldest > floor
    return {"lines": lines, "matched": len(lines), "read": read, "older": oldest if more else None}


def _error_rate(handle: IO[bytes], end: int, floor: int, wanted: AuditFilter) -> dict[str, Any]:
    """Each error code's matching calls per minute, over the RATE_MINUTES before the
    newest line under ``end`` (and at most RATE_BYTES of the file)."""
    markers = wanted.markers()
    per_minute: dict[str, Counter[str]] = {}
    horizon = ""
    for start, chunk in _chunks(handle, end, max(floor, end - RATE_BYTES)):
        if not horizon:
            horizon = _minutes_before(_stamp(chunk[max(0, chunk.rfind(_TIME)) :]), RATE_MINUTES)
        if chunk.count(_CODE) > chunk.count(_SUCCEEDED):  # a failed call somewhere in it
            for _, raw in _holding(chunk, start, markers, _FAILED):
                line = _parsed(raw)
                if line is not None and str(line["time"]) >= horizon and wanted.matches(line):
                    per_minute.setdefault(str(line["time"])[:_MINUTE_LENGTH], Counter())[str(line["code"])] += 1
        if _stamp(chunk) < horizon:  # its oldest line is past the plot's span
            break
    codes = sorted({code for counts in per_minute.values() for code in counts})
    minutes = sorted(per_minute)
    return {"minutes": minutes, "codes": {code: [per_minute[m][code] for m in minutes] for code in codes}}


def _parsed(raw: bytes) -> dict[str, Any] | None:
    """A line reduced to the listed fields; None for a line cut by a crash mid-write."""
    try:
        line = orjson.loads(raw)
    except ValueError:
        return None
    return {name: line.get(name) for name in AUDIT_FIELDS} if isinstance(line, dict) else None


def _stamp(raw: bytes) -> str:
    """A line's time stamp, read without parsing the line ('' if it has none)."""
    start = raw.find(_TIME)
    if start < 0:
        return ""
    start += len(_TIME)
    return raw[start : raw.find(b'"', start)].decode("ascii", "replace")


def _minutes_before(stamp: str, minutes: int) -> str:
    """The minute ``minutes`` before ``stamp``'s, as a stamp's prefix ('' if ``stamp``
    is not one)."""
    try:
        return (datetime.strptime(stamp[:_MINUTE_LENGTH], MINUTE) - timedelta(minutes=minutes)).strftime(MINUTE)
    except ValueError:
        return ""


def _first_line(handle: IO[bytes], size: int, later: Callable[[str], bool]) -> int:
    """The byte offset of the first line whose stamp is ``later`` (``size`` if none):
    a bisection, the log being appended in time order."""
    low, high = 0, size  # every line starting before `low` is earlier; the answer is <= high
    while high - low > BLOCK:
        middle = _line_start(handle, (low + high) // 2)
        if middle >= high:
            break
        handle.seek(middle)
        raw = handle.readline()
        if later(_stamp(raw)):
            high = middle
        else:
            low = middle + len(raw)
    handle.seek(low)
    while low < high:
        raw = handle.readline()
        if not raw or later(_stamp(raw)):
            break
        low += len(raw)
    return min(low, high)


def _line_start(handle: IO[bytes], offset: int) -> int:
    """The first line start at or after ``offset``."""
    if offset == 0:
        return 0
    handle.seek(offset - 1)
    return offset - 1 + len(handle.readline())


def _chunks(handle: IO[bytes], end: int, floor: int) -> Iterator[tuple[int, bytes]]:
    """The whole lines between byte offsets ``floor`` and ``end`` (a line start or the
    file's end), about BLOCK bytes of them at a time, newest first, each with the offset
    it starts at. A line cut by ``floor`` is left out."""
    position, rest = end, b""
    while position > floor:
        size = min(BLOCK, position - floor)
        position -= size
        handle.seek(position)
        data = handle.read(size) + rest
        cut = data.find(b"\n") + 1  # before it, a line that may start in an earlier block
        rest = data[:cut] if cut else data
        if cut and cut < len(data):
            yield position + cut, data[cut:]
    if rest and _line_start(handle, floor) == floor:
        yield floor, rest


def _holding(
    chunk: bytes, start: int, markers: list[bytes], anchor: re.Pattern[bytes] | None = None
) -> list[tuple[int, bytes]]:
    """The lines of ``chunk`` (whose first byte is at offset ``start``) that hold every
    marker (and a match of ``anchor``, if given), newest first, each with its offset.
    Found from the anchor's matches or the rarest marker's occurrences, in C, rather
    than line by line."""
    if any(marker not in chunk for marker in markers):
        return []
    if anchor is None and not markers:
        pieces = chunk.split(b"\n")
        offsets = accumulate((len(piece) + 1 for piece in pieces), initial=start)
        return [(offset, piece) for offset, piece in zip(offsets, pieces) if piece][::-1]
    if anchor is not None:
        positions: Iterator[int] = (match.start() for match in anchor.finditer(chunk))
    else:
        positions = _occurrences(chunk, min(markers, key=chunk.count))
    found, next_line = [], 0
    for at in positions:
        if at < next_line:
            continue  # in a line already taken
        left = chunk.rfind(b"\n", 0, at) + 1
        right = chunk.find(b"\n", at)
        right = len(chunk) if right < 0 else right
        line, next_line = chunk[left:right], right + 1
        if all(marker in line for marker in markers):
            found.append((start + left, line))
    return found[::-1]


def _occurrences(data: bytes, marker: bytes) -> Iterator[int]:
    at = data.find(marker)
    while at >= 0:
        yield at
        at = data.find(marker, at + 1)
