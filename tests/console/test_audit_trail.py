"""The audit log as the console reads it, against logs the real audit writer wrote:
pages chained by their cursor cover every matching line once, newest first; a time
filter finds its range by bisection; a page reads a bounded part of the file and says
where to read on; the error plot counts the newest hour; the recent searches are the
newest answered ones. Small read blocks make every path cross block boundaries."""

from __future__ import annotations

import json

import pytest

from engram.service.console import audit_trail
from engram.service.console.audit_trail import AuditFilter
from engram.service.mcp import audit as audit_writer
from engram.service.mcp.audit import AUDIT_FIELDS, AuditLog, Durability

SEARCH = "engram_memory_search"
CAPTURE = "engram_memory_capture"
RECEIPT = "sha256:" + "c" * 64
#: 2026-12-06T00:00:00Z, in milliseconds.
MIDNIGHT_MS = 1_796_515_200_000


@pytest.fixture(autouse=True)
def small_blocks(monkeypatch):
    monkeypatch.setattr(audit_trail, "BLOCK", 97)


def _log(path, n, seconds_apart=1.0):
    """``n`` calls, one each ``seconds_apart`` from midnight: every third a search, every
    ninth refused, tenants in turn."""
    now = [MIDNIGHT_MS]
    with pytest.MonkeyPatch.context() as clock:
        clock.setattr(audit_writer.time, "time_ns", lambda: now[0] * 1_000_000)
        _write(path, n, seconds_apart, now)


def _write(path, n, seconds_apart, now):
    log = AuditLog(path)
    for i in range(n):
        now[0] = MIDNIGHT_MS + int(i * seconds_apart * 1000)
        tool = SEARCH if i % 3 == 0 else CAPTURE
        log.record(
            audit_id=f"aud_{i:06d}",
            tool=tool,
            code="ok" if i % 9 else "RATE_LIMITED",
            latency_ms=1.0,
            tenant=("acme", "beta", "gamma")[i % 4 % 3],
            workspace="ws1",
            receipt_digest=RECEIPT if tool == SEARCH and i % 9 else None,
            durability=Durability.WRITTEN,
        )
    log.close()


def _every_line(path):
    return [json.loads(raw) for raw in path.read_bytes().splitlines()]


def _pages(path, wanted, limit):
    """The audit ids of every page, following each page's cursor to the start."""
    pages, before = [], None
    while True:
        view = audit_trail.audit(path, wanted, before=before, limit=limit)
        pages.append([line["auditId"] for line in view["lines"]])
        before = view["older"]
        if before is None:
            return pages
        assert len(pages) < 1000, "the cursor does not move"


@pytest.mark.parametrize(
    "wanted",
    [
        AuditFilter(),
        AuditFilter(tool=CAPTURE),
        AuditFilter(code="RATE_LIMITED", tenant="beta"),
        AuditFilter(since="2026-12-06T00:01:10"),
        AuditFilter(until="2026-12-06T00:02"),
        AuditFilter(tool=SEARCH, since="2026-12-06T00:00:30", until="2026-12-06T00:03:59"),
    ],
)
def test_pages_chained_by_their_cursor_are_every_matching_line_once_newest_first(tmp_path, wanted):
    path = tmp_path / "audit.jsonl"
    _log(path, 300)
    pages = _pages(path, wanted, limit=7)
    expected = [line["auditId"] for line in _every_line(path) if wanted.matches(line)][::-1]
    assert expected  # each filter matches something in this log
    assert [audit_id for page in pages for audit_id in page] == expected
    assert all(len(page) == 7 for page in pages[:-1])


def test_a_page_shows_the_listed_fields_only(tmp_path):
    path = tmp_path / "audit.jsonl"
    _log(path, 20)
    with open(path, "ab") as handle:
        handle.write(b'{"time":"2026-12-06T00:00:30.000Z","auditId":"aud_extra","tool":"t","code":"ok","query":"q"}\n')
    (extra, *_) = audit_trail.audit(path, AuditFilter())["lines"]
    assert extra["auditId"] == "aud_extra" and set(extra) == set(AUDIT_FIELDS)


def test_a_page_reads_a_bounded_part_of_the_log_and_says_where_to_read_on(tmp_path, monkeypatch):
    path = tmp_path / "audit.jsonl"
    _log(path, 400)
    monkeypatch.setattr(audit_trail, "SCAN_BYTES", path.stat().st_size // 5)
    nothing = _pages(path, AuditFilter(tenant="nobody"), limit=10)
    assert 5 <= len(nothing) <= 7 and not any(nothing)  # each page read a fifth, and said so
    unbounded = AuditFilter(tool=CAPTURE, tenant="gamma")
    first = audit_trail.audit(path, unbounded, limit=1000)
    assert 0 < first["read"] < 400 and first["older"] is not None
    pages = _pages(path, unbounded, limit=1000)
    assert 5 <= len(pages) <= 7
    expected = [line["auditId"] for line in _every_line(path) if unbounded.matches(line)][::-1]
    assert [audit_id for page in pages for audit_id in page] == expected


def test_the_error_plot_counts_each_code_per_minute_over_the_newest_hour(tmp_path):
    path = tmp_path / "audit.jsonl"
    _log(path, 500, seconds_apart=15)  # two hours and five minutes
    rate = audit_trail.audit(path, AuditFilter(tenant="acme"))["error_rate"]
    lines = _every_line(path)
    newest = lines[-1]["time"][:16]
    assert newest == "2026-12-06T02:04"
    counted: dict[str, int] = {}
    for line in lines:
        minute = line["time"][:16]
        if line["code"] != "ok" and line["tenant"] == "acme" and minute >= "2026-12-06T01:04":
            counted[minute] = counted.get(minute, 0) + 1
    assert dict(zip(rate["minutes"], rate["codes"]["RATE_LIMITED"], strict=True)) == counted
    assert list(rate["codes"]) == ["RATE_LIMITED"]


def test_a_line_cut_by_a_crash_is_skipped(tmp_path):
    path = tmp_path / "audit.jsonl"
    _log(path, 30)
    with open(path, "ab") as handle:
        handle.write(b'{"time":"2026-12-06T00:00:30.000Z","tool":"engram_memory_search","code":"ok","receipt_dig')
    view = audit_trail.audit(path, AuditFilter())
    assert [line["auditId"] for line in view["lines"]] == [f"aud_{i:06d}" for i in range(29, -1, -1)]


def test_recent_searches_are_the_newest_answered_searches_across_blocks(tmp_path):
    path = tmp_path / "audit.jsonl"
    _log(path, 300)
    with open(path, "ab") as handle:
        handle.write(b'{"tool":"engram_memory_search","code":"ok","receipt_dig')  # cut mid-write
    wanted = [f"aud_{i:06d}" for i in range(297, -1, -3) if i % 9][:10]
    assert [line["auditId"] for line in audit_trail.recent_searches(path, limit=10)] == wanted


def test_recent_searches_read_only_the_tail(tmp_path, monkeypatch):
    path = tmp_path / "audit.jsonl"
    _log(path, 300)
    monkeypatch.setattr(audit_trail, "SCAN_BYTES", path.stat().st_size // 2)
    found = [line["auditId"] for line in audit_trail.recent_searches(path, limit=1000)]
    answered = [f"aud_{i:06d}" for i in range(297, -1, -3) if i % 9]  # 66 in the whole file
    assert 0 < len(found) < len(answered)  # only the searches of the file's second half
    assert found == answered[: len(found)]


def test_no_audit_log_means_no_line_and_no_recent_search(tmp_path):
    assert audit_trail.recent_searches(tmp_path / "absent.jsonl") == []
    view = audit_trail.audit(tmp_path / "absent.jsonl", AuditFilter())
    assert view["lines"] == [] and view["older"] is None
