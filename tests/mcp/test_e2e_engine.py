"""End to end over real HTTP against the real Engine (lexical only, no model), both eras.

Every tool's success path, every gate_failed variant, and scope isolation answering
NOT_FOUND byte-identical (auditId aside) to an unknown id.
"""

from __future__ import annotations

import json
import time
import uuid

import pytest
from mcp.shared.exceptions import MCPError
from mcp_support import MODES, SECRET, ServerThread, claims, connect

from engram.models.host_token import mint_token
from engram.models.tools import CAPTURE, FORGET, GET, REQUEST_ADMISSION, SEARCH, WITHDRAW
from engram.service.engine.gates import operation_digest

engine_module = pytest.importorskip("engram.service.engine.engine")
pytestmark = pytest.mark.anyio

DIGEST = "sha256:" + "5e" * 32
PURPOSE = "purpose:test"


@pytest.fixture(scope="module")
def real(tmp_path_factory):
    from engram.service.http.app import create_app
    from engram.service.settings import Settings

    data_dir = tmp_path_factory.mktemp("engine-data")
    engine = engine_module.Engine.open(data_dir, load_model=False)
    for tenant in ("acme", "umbrella"):
        engine.operator.set_tenant_enabled(tenant, True)
    app = create_app(engine, Settings(data_dir=data_dir, rate=0), host_secret=SECRET)
    with ServerThread(app) as running:
        running.data_dir = data_dir
        yield running
    engine.close()


def key(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex}"


def capture_args(marker: str, kind: str = "decision") -> dict:
    now = int(time.time() * 1000)
    return {
        "idempotency_key": key("capture"),
        "payload": {
            "schema_version": 2,
            "purpose_ref": PURPOSE,
            "valid_time": {"t": now},
            "components": [
                {
                    "component_id": "c1",
                    "kind": kind,
                    "text": f"The ledger service stores balances in PostgreSQL; marker {marker}.",
                    "citation_ids": ["cit1"],
                }
            ],
            "primary_component_id": "c1",
            "primary_event": {"at": now, "type_ref": "event:decision", "citation_id": "cit1"},
            "citations": [
                {
                    "citation_id": "cit1",
                    "source_ref": "doc:adr-7",
                    "locator": {"scheme": "url", "value": "https://example.org/adr/7"},
                    "content_digest": DIGEST,
                }
            ],
        },
        "evidence": {"evidence_ref": "ev:adr-7", "evidence_digest": DIGEST, "citation_ids": ["cit1"]},
    }


def ctx_token(workspace: str = "ws1", tenant: str = "acme", **extra) -> str:
    return mint_token(claims(workspace=workspace, tenant=tenant, purpose=PURPOSE, **extra), SECRET)


def confirmation(
    tool: str,
    args: dict,
    target: str,
    *,
    ref: str | None = None,
    approved_ago_ms: int = 1_000,
    ttl_ms: int = 60_000,
    **overrides,
) -> dict:
    approved = int(time.time() * 1000) - approved_ago_ms
    body = {
        "ref": ref or key("conf"),
        "capability": tool,
        "target": target,
        "operation_digest": operation_digest(tool, args),
        "approved_at": approved,
        "expires_at": approved + ttl_ms,
    }
    body.update(overrides)
    return body


def confirmed_token(tool: str, args: dict, target: str, workspace: str = "ws1", **kw) -> str:
    return ctx_token(workspace=workspace, confirmation=confirmation(tool, args, target, **kw))


async def call(url: str, tok: str, mode: str, tool: str, args: dict) -> dict:
    async with connect(url, tok, mode) as client:
        result = await client.call_tool(tool, args)
    env = result.structured_content
    assert json.loads(result.content[0].text) == env
    assert result.is_error is (not env["ok"])
    return env


def value(env: dict) -> dict:
    assert env["ok"], env
    return env["output"]["value"]


def code(env: dict) -> str:
    assert not env["ok"], env
    return env["error"]["code"]


async def admitted_record(url: str, mode: str, marker: str, workspace: str = "ws1") -> tuple[str, str]:
    tok = ctx_token(workspace=workspace)
    captured = value(await call(url, tok, mode, CAPTURE, capture_args(marker)))
    assert captured["status"] == "committed_pending"
    admitted = value(
        await call(
            url,
            tok,
            mode,
            REQUEST_ADMISSION,
            {"candidate_id": captured["candidate_id"], "idempotency_key": key("admit")},
        )
    )
    assert admitted["outcome"]["status"] == "accepted" and admitted["replayed"] is False
    return captured["candidate_id"], admitted["outcome"]["record_id"]


@pytest.mark.parametrize("mode", MODES)
async def test_capture_admit_search_get_forget(real, mode):
    marker = f"quokka{uuid.uuid4().hex[:10]}"
    _, record_id = await admitted_record(real.url, mode, marker)
    tok = ctx_token()

    found = value(await call(real.url, tok, mode, SEARCH, {"query": f"ledger {marker}", "purpose_ref": PURPOSE}))
    assert [p["record"]["record_id"] for p in found["records"]] == [record_id]
    got = value(await call(real.url, tok, mode, GET, {"record_id": record_id, "purpose_ref": PURPOSE}))
    assert got["record"]["record_id"] == record_id and got["read_receipt"]["record_id"] == record_id

    args = {"record_id": record_id, "idempotency_key": key("forget"), "reason_ref": "reason:obsolete"}
    conf_tok = confirmed_token(FORGET, args, record_id)
    forgot = value(await call(real.url, conf_tok, mode, FORGET, args))
    assert forgot["receipt"]["operation"] == "tombstone" and forgot["receipt"]["to_state"] == "tombstoned"
    assert forgot["replayed"] is False
    # The same call again is a replay: no second confirmation is consumed.
    again = value(await call(real.url, conf_tok, mode, FORGET, args))
    assert again["replayed"] is True

    assert code(await call(real.url, tok, mode, GET, {"record_id": record_id, "purpose_ref": PURPOSE})) == "NOT_FOUND"
    after = value(await call(real.url, tok, mode, SEARCH, {"query": f"ledger {marker}", "purpose_ref": PURPOSE}))
    assert after["records"] == []


@pytest.mark.parametrize("mode", MODES)
async def test_capture_withdraw(real, mode):
    tok = ctx_token()
    captured = value(await call(real.url, tok, mode, CAPTURE, capture_args("withdrawn-one")))
    cid = captured["candidate_id"]
    args = {"candidate_id": cid, "idempotency_key": key("withdraw"), "reason_ref": "reason:mistake"}
    out = value(await call(real.url, confirmed_token(WITHDRAW, args, cid), mode, WITHDRAW, args))
    assert out["receipt"]["operation"] == "withdraw"
    assert (out["receipt"]["from_state"], out["receipt"]["to_state"]) == ("pending", "withdrawn")
    assert out["key_destruction"] in ("pending", "complete")


GATE_VARIANTS = [
    "missing",
    "expired",
    "reused",
    "wrong target",
    "wrong digest",
    "too late",
    "wrong capability",
    "ttl too long",
]


@pytest.mark.parametrize("variant", GATE_VARIANTS)
async def test_forget_gate_failed(real, variant):
    mode = "auto" if GATE_VARIANTS.index(variant) % 2 else "legacy"
    _, record_id = await admitted_record(real.url, mode, f"gate-{variant}")
    args = {"record_id": record_id, "idempotency_key": key("forget"), "reason_ref": "reason:x"}
    if variant == "missing":
        tok = ctx_token()
    elif variant == "expired":
        tok = confirmed_token(FORGET, args, record_id, approved_ago_ms=20_000, ttl_ms=10_000)
    elif variant == "reused":
        # A ref already consumed by another confirmed operation cannot be used again.
        cand = value(await call(real.url, ctx_token(), mode, CAPTURE, capture_args("reuse")))["candidate_id"]
        wargs = {"candidate_id": cand, "idempotency_key": key("withdraw"), "reason_ref": "reason:x"}
        ref = key("conf")
        assert (await call(real.url, confirmed_token(WITHDRAW, wargs, cand, ref=ref), mode, WITHDRAW, wargs))["ok"]
        tok = confirmed_token(FORGET, args, record_id, ref=ref)
    elif variant == "wrong target":
        tok = confirmed_token(FORGET, args, "mem_aaaaaaaa")
    elif variant == "wrong digest":
        tok = confirmed_token(
            FORGET, args, record_id, operation_digest=operation_digest(FORGET, {**args, "reason_ref": "other"})
        )
    elif variant == "too late":
        tok = confirmed_token(FORGET, args, record_id, approved_ago_ms=31_000, ttl_ms=120_000)
    elif variant == "wrong capability":
        tok = confirmed_token(FORGET, args, record_id, capability=WITHDRAW)
    elif variant == "ttl too long":
        tok = confirmed_token(FORGET, args, record_id, ttl_ms=300_001)
    env = await call(real.url, tok, mode, FORGET, args)
    assert env["error"] == {
        "code": "gate_failed",
        "message": "A confirmation or policy gate was not met.",
        "retriable": False,
    }
    # The record is untouched.
    got = await call(real.url, ctx_token(), mode, GET, {"record_id": record_id, "purpose_ref": PURPOSE})
    assert got["ok"]


async def test_withdraw_without_confirmation_is_gate_failed(real):
    cid = value(await call(real.url, ctx_token(), "auto", CAPTURE, capture_args("w-missing")))["candidate_id"]
    args = {"candidate_id": cid, "idempotency_key": key("withdraw"), "reason_ref": "reason:x"}
    assert code(await call(real.url, ctx_token(), "auto", WITHDRAW, args)) == "gate_failed"


@pytest.mark.parametrize("mode", MODES)
async def test_capture_confirmation_when_host_requires_it(real, mode):
    args = capture_args("confirm-capture")
    tok = ctx_token(confirm=[CAPTURE])
    assert code(await call(real.url, tok, mode, CAPTURE, args)) == "gate_failed"
    good = ctx_token(confirm=[CAPTURE], confirmation=confirmation(CAPTURE, args, args["idempotency_key"]))
    assert value(await call(real.url, good, mode, CAPTURE, args))["status"] == "committed_pending"


def _strip_audit(env: dict) -> str:
    return json.dumps({k: v for k, v in env.items() if k != "auditId"}, sort_keys=True)


@pytest.mark.parametrize("mode", MODES)
async def test_other_scope_is_not_found_like_unknown(real, mode):
    cid, record_id = await admitted_record(real.url, mode, "isolated")
    pending = value(await call(real.url, ctx_token(), mode, CAPTURE, capture_args("isolated-pending")))["candidate_id"]
    unknown_record = "mem_" + "a" * 52
    for other in (ctx_token(workspace="ws2"), ctx_token(tenant="umbrella")):
        pairs = [
            (
                GET,
                {"record_id": record_id, "purpose_ref": PURPOSE},
                {"record_id": unknown_record, "purpose_ref": PURPOSE},
            ),
            (
                REQUEST_ADMISSION,
                {"candidate_id": pending, "idempotency_key": "k" * 20},
                {"candidate_id": "cand_unknown", "idempotency_key": "k" * 20},
            ),
        ]
        for tool, theirs, unknown in pairs:
            a = await call(real.url, other, mode, tool, theirs)
            b = await call(real.url, other, mode, tool, unknown)
            assert code(a) == code(b) == "NOT_FOUND"
            assert _strip_audit(a) == _strip_audit(b)
        # Gated transitions too, even with a valid confirmation for that target.
        fargs = {"record_id": record_id, "idempotency_key": key("forget"), "reason_ref": "reason:x"}
        uargs = {**fargs, "record_id": unknown_record}
        a = await call(real.url, confirmed_token(FORGET, fargs, record_id, workspace="ws2"), mode, FORGET, fargs)
        b = await call(real.url, confirmed_token(FORGET, uargs, unknown_record, workspace="ws2"), mode, FORGET, uargs)
        assert code(a) == code(b) == "NOT_FOUND" and _strip_audit(a) == _strip_audit(b)
        found = value(await call(real.url, other, mode, SEARCH, {"query": "isolated ledger", "purpose_ref": PURPOSE}))
        assert all(p["record"]["record_id"] != record_id for p in found["records"])
    # Still there for its own scope.
    assert (await call(real.url, ctx_token(), mode, GET, {"record_id": record_id, "purpose_ref": PURPOSE}))["ok"]


async def test_audit_log_never_holds_content_real_engine(real):
    marker = f"narwhal{uuid.uuid4().hex[:12]}"
    await admitted_record(real.url, "auto", marker)
    async with connect(real.url, ctx_token(), "legacy") as client:
        await client.call_tool(SEARCH, {"query": marker, "purpose_ref": PURPOSE})
        with pytest.raises(MCPError):
            await client.call_tool(SEARCH, {"query": marker, "purpose_ref": "wrong purpose"})
    raw = (real.data_dir / "audit.jsonl").read_text()
    assert marker not in raw and "PostgreSQL" not in raw


async def test_readyz_real_engine(real):
    import httpx

    # Its own search: the module's other tests may run in another test worker.
    value(await call(real.url, ctx_token(), "auto", SEARCH, {"query": "ledger", "purpose_ref": PURPOSE}))
    response = httpx.get(real.base + "/readyz")
    body = response.json()
    # Without a model the engine reports the semantic channel down (its choice): 503 + reason.
    assert response.status_code == (200 if body["ready"] else 503)
    assert body["ready"] or body["reasons"]
    metrics = httpx.get(real.base + "/metrics").text
    assert 'engram_mcp_calls_total{code="ok",tool="engram_memory_search"}' in metrics


async def test_model_written_confirmed_flag_is_invalid_schema(real):
    _, record_id = await admitted_record(real.url, "auto", "self-confirm")
    args = {"record_id": record_id, "idempotency_key": key("forget"), "reason_ref": "reason:x", "confirmed": True}
    assert code(await call(real.url, ctx_token(), "auto", FORGET, args)) == "INVALID_SCHEMA"
    assert (await call(real.url, ctx_token(), "auto", GET, {"record_id": record_id, "purpose_ref": PURPOSE}))["ok"]
