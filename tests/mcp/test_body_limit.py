"""The request body cap holds before authentication: an oversized body is 413 whether it
declares its length or streams it, and the engine never sees it."""

from __future__ import annotations

from mcp_support import SECRET, FakeEngine
from starlette.testclient import TestClient

from engram.service.http.app import create_app
from engram.service.http.body_limit import MAX_REQUEST_BYTES
from engram.service.settings import Settings


def _client(tmp_path) -> tuple[TestClient, FakeEngine]:
    engine = FakeEngine()
    return TestClient(create_app(engine, Settings(data_dir=tmp_path), host_secret=SECRET)), engine


def test_declared_oversize_is_refused_without_a_context(tmp_path) -> None:
    client, engine = _client(tmp_path)
    with client:
        big = b"x" * (MAX_REQUEST_BYTES + 1)
        answer = client.post("/mcp", content=big, headers={"content-type": "application/json"})
        assert answer.status_code == 413
        assert answer.json()["max_bytes"] == MAX_REQUEST_BYTES
        # a small body without a context is refused by authentication, not by the cap
        small = client.post("/mcp", content=b"{}", headers={"content-type": "application/json"})
        assert small.status_code not in (413, 200)


def test_streamed_oversize_is_refused(tmp_path) -> None:
    client, engine = _client(tmp_path)

    def chunks():
        chunk = b"y" * 65_536
        for _ in range(MAX_REQUEST_BYTES // len(chunk) + 2):
            yield chunk

    with client:
        answer = client.post("/mcp", content=chunks(), headers={"content-type": "application/json"})
        assert answer.status_code == 413
