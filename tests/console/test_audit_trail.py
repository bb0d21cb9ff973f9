"""The audit log's recent searches, read from the file's end back, against a real
audit log: the newest first, across read blocks, without a line cut by a crash."""

from __future__ import annotations

from engram.service.console import audit_trail
from engram.service.mcp.audit import AuditLog, Durability

SEARCH = "engram_memory_search"
RECEIPT = "sha256:" + "c" * 64


def _log(path, n):
    log = AuditLog(path)
    for i in range(n):
        tool = SEARCH if i % 3 == 0 else "engram_memory_capture"
        log.record(
            audit_id=f"aud_{i:06d}",
            tool=tool,
            code="ok" if i % 9 else "RATE_LIMITED",
            latency_ms=1.0,
            tenant="acme",
            workspace="ws1",
            receipt_digest=RECEIPT if tool == SEARCH and i % 9 else None,
            durability=Durability.WRITTEN,
        )
    log.close()


def test_recent_searches_are_the_newest_answered_searches_across_blocks(tmp_path, monkeypatch):
    path = tmp_path / "audit.jsonl"
    _log(path, 300)
    with open(path, "ab") as handle:
        handle.write(b'{"tool":"engram_memory_search","code":"ok","receipt_dig')  # cut mid-write
    monkeypatch.setattr(audit_trail, "_newest_first", _small_blocks(audit_trail._newest_first))
    wanted = [f"aud_{i:06d}" for i in range(297, -1, -3) if i % 9][:10]
    assert [line["auditId"] for line in audit_trail.recent_searches(path, limit=10)] == wanted


def test_recent_searches_read_only_the_tail(tmp_path, monkeypatch):
    path = tmp_path / "audit.jsonl"
    _log(path, 300)
    size = path.stat().st_size
    monkeypatch.setattr(audit_trail, "TAIL_BYTES", size // 2)
    found = [line["auditId"] for line in audit_trail.recent_searches(path, limit=1000)]
    answered = [f"aud_{i:06d}" for i in range(297, -1, -3) if i % 9]  # 66 in the whole file
    assert 0 < len(found) < len(answered)  # only the searches of the file's second half
    assert found == answered[: len(found)]


def test_no_audit_log_means_no_recent_search(tmp_path):
    assert audit_trail.recent_searches(tmp_path / "absent.jsonl") == []


def _small_blocks(read):
    return lambda path: read(path, block=97)
