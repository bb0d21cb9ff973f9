"""Duplicate keys in tool arguments are INVALID_SCHEMA, sent as raw JSON-RPC over HTTP
(an SDK client cannot produce them: its dicts cannot repeat a key)."""

from __future__ import annotations

import json

import httpx
from mcp_support import HEADER, token

from engram.service.http.duplicate_keys import has_duplicate_keys_in_tool_call

META = (
    '"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}'
)
CALL = (
    '{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"engram_memory_search",'
    '"arguments":{"query":"a","query":"b","purpose_ref":"purpose:test"},' + META + "}}"
)


def _post(url: str, body: str, **extra_headers: str) -> dict:
    """One raw modern-era (2026-07-28) tools/call over HTTP; the parsed JSON-RPC reply."""
    headers = {
        HEADER: token(),
        "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": "2026-07-28",
        "Mcp-Method": "tools/call",
        "Mcp-Name": "engram_memory_search",
        **extra_headers,
    }
    response = httpx.post(url, content=body.encode(), headers=headers, timeout=10)
    assert response.status_code == 200, response.text
    text = response.text
    if "data:" in text:
        text = next(line[5:] for line in text.splitlines() if line.startswith("data:"))
    return json.loads(text)


def test_detector_only_marks_tool_calls_with_repeated_keys() -> None:
    assert has_duplicate_keys_in_tool_call(CALL.encode())
    assert not has_duplicate_keys_in_tool_call(CALL.replace('"query":"b",', "").encode())
    assert not has_duplicate_keys_in_tool_call(b'{"method":"tools/list","a":1,"a":2}')
    assert not has_duplicate_keys_in_tool_call(b"not json")


def test_duplicate_argument_key_is_invalid_schema_over_http(fake) -> None:
    reply = _post(fake.url, CALL)
    result = reply["result"]
    envelope = result["structuredContent"]
    assert result["isError"] is True
    assert envelope["ok"] is False and envelope["error"]["code"] == "INVALID_SCHEMA"
    assert json.loads(result["content"][0]["text"]) == envelope


def test_spoofed_marker_header_is_ignored(fake) -> None:
    body = CALL.replace('"query":"b",', "")
    reply = _post(fake.url, body, **{"x-engram-duplicate-keys": "1"})
    envelope = reply["result"]["structuredContent"]
    assert envelope["error"]["code"] == "NOT_FOUND"  # what the fake engine answers
