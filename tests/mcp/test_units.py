"""Small units: rate limiter, audit log, transport security settings."""

from __future__ import annotations

import json
import os
import stat

from mcp_support import SECRET, FakeEngine, token
from starlette.testclient import TestClient

from service.mcp.app import create_app
from service.mcp.audit import AuditLog, audit_digest
from service.mcp.rate_limit import TokenBucketLimiter
from service.settings import Settings


def test_token_bucket_refills():
    now = [0.0]
    limiter = TokenBucketLimiter(rate=2.0, burst=3, clock=lambda: now[0])
    key = ("t", "p")
    assert [limiter.allow(key) for _ in range(4)] == [True, True, True, False]
    assert limiter.allow(("t", "other"))
    now[0] += 0.5  # one token back
    assert limiter.allow(key) and not limiter.allow(key)
    now[0] += 100
    assert sum(limiter.allow(key) for _ in range(10)) == 3
    assert all(TokenBucketLimiter(rate=0, burst=1).allow(key) for _ in range(100))


def test_audit_log_lines(tmp_path):
    log = AuditLog(tmp_path / "a" / "audit.jsonl")
    log.record(audit_id="aud_1", tool="x", code="ok", latency_ms=1.23456, tenant="t",
               arguments_digest=audit_digest("arguments", {"q": "secret words"}))
    log.record(audit_id="aud_2", tool="x", code="-32603", latency_ms=0.1)
    log.close()
    path = tmp_path / "a" / "audit.jsonl"
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert [line["auditId"] for line in lines] == ["aud_1", "aud_2"]
    assert lines[0]["latency_ms"] == 1.235 and lines[0]["time"].endswith("Z")
    assert "secret words" not in path.read_text()
    # Digests are domain-separated and deterministic.
    assert audit_digest("arguments", {"a": 1}) == audit_digest("arguments", {"a": 1})
    assert audit_digest("arguments", {"a": 1}) != audit_digest("response", {"a": 1})
    assert audit_digest("arguments", {"x": float("nan")}).startswith("sha256:")


def _post(client: TestClient, host: str) -> int:
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    headers = {
        "Host": host,
        "Accept": "application/json, text/event-stream",
        "Content-Type": "application/json",
        "X-Engram-Context": token(),
        "MCP-Protocol-Version": "2025-11-25",
    }
    return client.post("/mcp", json=body, headers=headers).status_code


def test_allowed_hosts_for_non_loopback(tmp_path):
    settings = Settings(data_dir=tmp_path, host="0.0.0.0", allowed_hosts=["memory.internal:8765"])
    app = create_app(FakeEngine(), settings, host_secret=SECRET)
    with TestClient(app, base_url="http://memory.internal:8765") as client:
        assert _post(client, "memory.internal:8765") != 421
        assert _post(client, "evil.example:8765") == 421
