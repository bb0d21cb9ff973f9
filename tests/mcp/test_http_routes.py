"""The non-MCP routes and HTTP-level protections."""

from __future__ import annotations

import httpx
from mcp_support import token


def test_healthz_readyz_metrics_openapi(fake, fake_engine):
    with httpx.Client(base_url=fake.base) as http:
        assert http.get("/healthz").json() == {"status": "ok"}
        assert http.get("/readyz").status_code == 200
        fake_engine.ready = {"ready": False, "reasons": ["projections catching up"]}
        response = http.get("/readyz")
        assert response.status_code == 503
        assert response.json() == {"ready": False, "reasons": ["projections catching up"]}
        metrics = http.get("/metrics")
        assert metrics.status_code == 200 and "engram_mcp_calls_total" in metrics.text
        paths = http.get("/openapi.json").json()["paths"]
        assert {"/healthz", "/readyz", "/metrics"} <= set(paths)
        assert http.get("/docs").status_code == 200


def test_dns_rebinding_protection(fake):
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    headers = {
        "Host": "evil.example:80",
        "Accept": "application/json, text/event-stream",
        "Content-Type": "application/json",
        "X-Engram-Context": token(),
    }
    with httpx.Client(base_url=fake.base) as http:
        response = http.post("/mcp", json=body, headers=headers)
    assert response.status_code == 421
