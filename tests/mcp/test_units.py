"""Small units: rate limiter, audit log, transport security settings."""

from __future__ import annotations

import json
import os
import stat
import threading

import pytest
from mcp_support import SECRET, FakeEngine, token
from starlette.testclient import TestClient

from engram.service.http.app import create_app
from engram.service.mcp import audit as audit_module
from engram.service.mcp.audit import AuditLog, Durability, audit_digest
from engram.service.mcp.rate_limit import TokenBucketLimiter
from engram.service.settings import Settings


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
    log.record(
        audit_id="aud_1",
        tool="x",
        code="ok",
        latency_ms=1.23456,
        tenant="t",
        arguments_digest=audit_digest("arguments", {"q": "secret words"}),
    )
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


class _HeldFlush:
    """Stands in for fdatasync: counts flushes and holds the first until released."""

    def __init__(self, fail: bool = False) -> None:
        self.calls = 0
        self.entered = threading.Event()
        self.release = threading.Event()
        self.fail = fail

    def __call__(self, fd: int) -> None:
        self.calls += 1
        self.entered.set()
        self.release.wait()
        if self.fail:
            raise OSError("disk gone")
        os.fsync(fd)


def test_audit_group_commit_shares_one_flush(tmp_path, monkeypatch):
    """Lines written while a flush runs wait for the next one, and share it; a synced
    line's call returns only after its flush, a written line's call at once."""
    flush = _HeldFlush()
    monkeypatch.setattr(audit_module, "_flush", flush)
    log = AuditLog(tmp_path / "audit.jsonl")
    returned: list[str] = []

    def call(audit_id: str, durability: Durability) -> None:
        log.record(audit_id=audit_id, tool="x", code="ok", latency_ms=1.0, durability=durability)
        returned.append(audit_id)

    first = threading.Thread(target=call, args=("aud_first", Durability.SYNCED))
    first.start()
    assert flush.entered.wait(10)  # the syncer is flushing the first line, and holds
    later = [threading.Thread(target=call, args=(f"aud_{i}", Durability.SYNCED)) for i in range(4)]
    for thread in later:
        thread.start()
    call("aud_read", Durability.WRITTEN)  # returns while the flush is held
    assert returned == ["aud_read"]
    first.join(0.2)
    assert first.is_alive()  # not answered before its line is on disk
    written = threading.Event()
    for _ in range(1000):  # the four callers write their lines, then wait for the flush
        if len((tmp_path / "audit.jsonl").read_text().splitlines()) == 6:
            written.set()
            break
        written.wait(0.01)
    assert written.is_set()
    assert len(returned) == 1  # none of the synced calls has returned
    flush.release.set()
    for thread in (first, *later):
        thread.join(10)
    assert sorted(returned) == sorted(["aud_read", "aud_first", *(f"aud_{i}" for i in range(4))])
    log.close()
    # The first flush covered one line; the five written during it (four synced calls
    # and the read) shared the second.
    assert flush.calls == 2


def test_audit_flush_failure_is_reported(tmp_path, monkeypatch):
    flush = _HeldFlush(fail=True)
    flush.release.set()
    monkeypatch.setattr(audit_module, "_flush", flush)
    log = AuditLog(tmp_path / "audit.jsonl")
    with pytest.raises(OSError):
        log.record(audit_id="aud_1", tool="x", code="ok", latency_ms=1.0, durability=Durability.SYNCED)
    log.close()
    with pytest.raises(OSError):  # closed: refused, not silently dropped
        log.record(audit_id="aud_2", tool="x", code="ok", latency_ms=1.0)


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


@pytest.mark.parametrize("version", ["2026-07-28", "2025-11-25"])
@pytest.mark.parametrize("ok", [True, False])
def test_wire_result_matches_the_sdk_model_dump(version, ok):
    """The front end hands the SDK a tool result in its wire form; the SDK's outbound
    check and dump of it must give what a `CallToolResult` model would have given."""
    import mcp_types as types
    from mcp_types import methods

    from engram.models.codes import ErrorCode
    from engram.models.envelope import failure_envelope, success_envelope
    from engram.service.mcp.server import Answer, envelope_result

    value = {"records": [{"score": 0.5, "note": None, "text": "café ☕"}], "next_page_cursor": "c.1"}
    envelope = success_envelope(value, "aud_" + "0" * 32) if ok else failure_envelope(ErrorCode.NOT_FOUND, "aud_1")
    answer = Answer.of(envelope)
    model = types.CallToolResult(
        content=[types.TextContent(text=answer.text)], structured_content=envelope, is_error=not ok
    )
    via_model = methods.serialize_server_result(
        "tools/call", version, model.model_dump(by_alias=True, mode="json", exclude_none=True)
    )
    via_wire = methods.serialize_server_result("tools/call", version, envelope_result(answer))
    assert json.dumps(via_wire) == json.dumps(via_model)
    assert via_wire["structuredContent"] == json.loads(via_wire["content"][0]["text"]) == envelope
    assert via_wire["isError"] is (not ok)


def test_an_envelope_text_is_its_compact_json_whatever_writes_it():
    """orjson writes the text content; a value it cannot write (a numpy scalar, an
    integer past 64 bits) is written by the standard library instead, never refused."""
    import numpy as np

    from engram.models.codes import ErrorCode
    from engram.models.envelope import envelope_text, success_envelope

    value = {"text": 'caf\u00e9 \u2028 "q"\n', "score": 1e-06, "n": 2**53 - 1, ErrorCode.RATE_LIMITED: [True, None]}
    text = envelope_text(success_envelope(value, "aud_" + "0" * 32))
    assert json.loads(text)["output"]["value"] == value  # the StrEnum key written as its value
    assert ", " not in text and ": " not in text and "\u00e9" in text  # compact, UTF-8 unescaped
    for unusual in (np.float64(0.25), 2**70):
        assert json.loads(envelope_text(success_envelope({"x": unusual}, "aud_" + "0" * 32)))["output"]["value"] == {
            "x": unusual
        }
