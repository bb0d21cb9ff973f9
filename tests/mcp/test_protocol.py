"""Protocol-level behaviour over real HTTP with the SDK client, in both eras.

Uses a scripted fake engine; `test_e2e_engine.py` drives the real engine.
"""

from __future__ import annotations

import json
import time

import jwt
import pytest
from mcp.shared.exceptions import MCPError
from mcp_support import ALL_TOOLS, MODES, SECRET, claims, connect, token

from engram.models.codes import MESSAGES, ContractError, ErrorCode
from engram.models.host_token import mint_token
from engram.models.tools import CAPTURE, FORGET, GET, SEARCH, WITHDRAW
from engram.service.mcp.audit import audit_text_digest
from engram.service.store import StoreUnavailable

pytestmark = pytest.mark.anyio

CTX = (-32603, "Trusted invocation context unavailable")
UNKNOWN = (-32602, "Unknown tool")

SEARCH_ARGS = {"query": "anything", "purpose_ref": "purpose:test"}


def capture_args(purpose: str = "purpose:test", text: str = "some durable fact") -> dict:
    return {
        "idempotency_key": "key-0123456789abcdef",
        "payload": {"purpose_ref": purpose, "components": [{"text": text}]},
        "evidence": {},
    }


async def expect_protocol_error(url: str, tok: str | None, mode: str, tool: str, args: dict, expected) -> None:
    async with connect(url, tok, mode) as client:
        with pytest.raises(MCPError) as info:
            await client.call_tool(tool, args)
        assert (info.value.code, info.value.message) == expected
        assert info.value.data is None


@pytest.mark.parametrize("mode", MODES)
async def test_eras_negotiate(fake, mode):
    async with connect(fake.url, token(), mode) as client:
        assert client.protocol_version == ("2026-07-28" if mode == "auto" else "2025-11-25")


@pytest.mark.parametrize("mode", MODES)
async def test_tools_list_is_filtered_by_grants(fake, mode):
    async with connect(fake.url, token(tools=[SEARCH, GET]), mode) as client:
        listed = await client.list_tools()
    assert sorted(t.name for t in listed.tools) == [GET, SEARCH]
    for tool in listed.tools:
        assert tool.input_schema["additionalProperties"] is False
        assert tool.output_schema is not None
    async with connect(fake.url, token(), mode) as client:
        listed = await client.list_tools()
    assert sorted(t.name for t in listed.tools) == ALL_TOOLS


@pytest.mark.parametrize("mode", MODES)
async def test_tools_list_without_context_is_refused(fake, mode):
    async with connect(fake.url, None, mode) as client:
        with pytest.raises(MCPError) as info:
            await client.list_tools()
    assert (info.value.code, info.value.message) == CTX


def _alg_none(**kw) -> str:
    body = claims(**kw)
    now = int(time.time())
    body.update(iat=now, exp=now + 300)
    return jwt.encode(body, None, algorithm="none")


def _hs512() -> str:
    body = claims()
    now = int(time.time())
    body.update(iat=now, exp=now + 300)
    return jwt.encode(body, SECRET + b"-longer-key-for-hs512-xxxxxxxxxxxxxxxxxxxx", algorithm="HS512")


REJECTIONS = {
    "no header": lambda: None,
    "garbage": lambda: "not-a-jwt",
    "bad signature": lambda: token(secret=b"another-secret-0123456789abcdef-0123"),
    "alg none": _alg_none,
    "other alg": _hs512,
    "expired": lambda: mint_token(claims(), SECRET, now_s=time.time() - 4000, ttl_s=60),
    "tenant not enabled": lambda: token(tenant="globex"),
    "missing claim": lambda: token(purpose=None),
    "unknown claim": lambda: token(scope="everything"),
    "confirm outside subset": lambda: token(confirm=[FORGET]),
    "lifetime too long": lambda: token(ttl_s=200_000),
}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("case", sorted(REJECTIONS))
async def test_context_rejections(fake, fake_engine, mode, case):
    await expect_protocol_error(fake.url, REJECTIONS[case](), mode, SEARCH, SEARCH_ARGS, CTX)
    assert fake_engine.calls == []


@pytest.mark.parametrize("mode", MODES)
async def test_a_disabled_tenant_is_refused_before_anything_else(fake, fake_engine, mode):
    """Whether the tenant is checked on the event loop (a refusal is due anyway) or in
    the engine's worker (the common path), a tenant not opted in answers -32603 first:
    not Unknown tool, not RATE_LIMITED."""
    off = token(tenant="globex", tools=[SEARCH])
    await expect_protocol_error(fake.url, off, mode, GET, {"record_id": "mem_a", "purpose_ref": "purpose:test"}, CTX)
    await expect_protocol_error(fake.url, off, mode, SEARCH, {**SEARCH_ARGS, "purpose_ref": "other"}, CTX)
    for _ in range(12):  # past the principal's burst
        await expect_protocol_error(fake.url, off, mode, SEARCH, SEARCH_ARGS, CTX)
    assert fake_engine.calls == []


@pytest.mark.parametrize("mode", MODES)
async def test_purpose_mismatch_is_protocol_error(fake, fake_engine, mode):
    await expect_protocol_error(fake.url, token(), mode, SEARCH, {**SEARCH_ARGS, "purpose_ref": "other"}, CTX)
    await expect_protocol_error(fake.url, token(), mode, GET, {"record_id": "mem_a", "purpose_ref": "x"}, CTX)
    await expect_protocol_error(fake.url, token(), mode, CAPTURE, capture_args(purpose="other"), CTX)
    assert fake_engine.calls == []


@pytest.mark.parametrize("mode", MODES)
async def test_ungranted_and_unknown_tools(fake, fake_engine, mode):
    await expect_protocol_error(fake.url, token(tools=[SEARCH]), mode, GET, {"record_id": "mem_a"}, UNKNOWN)
    await expect_protocol_error(fake.url, token(), mode, "engram_memory_admin", {}, UNKNOWN)
    assert fake_engine.calls == []


@pytest.mark.parametrize("mode", MODES)
async def test_arguments_cannot_change_the_context(fake, fake_engine, mode):
    args = {**SEARCH_ARGS, "tenant": "globex", "workspace": "other", "principal": "root"}
    fake_engine.behaviour[SEARCH] = lambda ctx, a: (_ for _ in ()).throw(ContractError(ErrorCode.INVALID_SCHEMA))
    async with connect(fake.url, token(), mode) as client:
        result = await client.call_tool(SEARCH, args, meta={"tenant": "globex"})
    assert result.structured_content["error"]["code"] == "INVALID_SCHEMA"
    ((tool, ctx, seen),) = fake_engine.calls
    assert (ctx.tenant, ctx.workspace) == ("acme", "ws1")
    assert seen == args  # passed through untouched: the engine rejects the extra fields


def _check_envelope(result, ok: bool) -> dict:
    env = result.structured_content
    assert result.is_error is (not ok)
    assert len(result.content) == 1 and result.content[0].type == "text"
    assert json.loads(result.content[0].text) == env
    assert env["ok"] is ok
    assert env["redactionClass"] == "high"
    assert env["auditId"].startswith("aud_") and len(env["auditId"]) == 36
    return env


@pytest.mark.parametrize("mode", MODES)
async def test_envelope_shapes(fake, mode):
    async with connect(fake.url, token(), mode) as client:
        ok = _check_envelope(await client.call_tool(CAPTURE, capture_args()), True)
        assert ok["output"] == {"schema_version": 1, "value": ok["output"]["value"]}
        assert ok["output"]["value"]["status"] == "committed_pending"
        bad = _check_envelope(await client.call_tool(GET, {"record_id": "mem_a", "purpose_ref": "purpose:test"}), False)
        assert bad["error"] == {"code": "NOT_FOUND", "message": "The target is not available.", "retriable": False}
        again = _check_envelope(await client.call_tool(CAPTURE, capture_args()), True)
        assert again["auditId"] != ok["auditId"]


def _boom(ctx, args):
    raise RuntimeError("secret internal detail /var/lib/engram")


@pytest.mark.parametrize("mode", MODES)
async def test_unexpected_engine_exception_is_clean(fake, fake_engine, mode):
    fake_engine.behaviour[SEARCH] = _boom
    fake_engine.behaviour[CAPTURE] = _boom
    async with connect(fake.url, token(), mode) as client:
        read = await client.call_tool(SEARCH, SEARCH_ARGS)
        write = await client.call_tool(CAPTURE, capture_args())
    for result in (read, write):
        assert "secret internal detail" not in result.content[0].text
        assert "Traceback" not in result.content[0].text
    assert read.structured_content["error"]["code"] == "STORE_UNAVAILABLE"
    # A mutation that failed after it started may have committed.
    assert write.structured_content["error"]["code"] == "MUTATION_OUTCOME_UNKNOWN"


@pytest.mark.parametrize("mode", MODES)
async def test_unexpected_exception_outside_engine_is_clean(fake, fake_engine, mode):
    def broken_tenant(tenant):
        raise RuntimeError("secret internal detail")

    fake_engine.tenant_enabled = broken_tenant  # type: ignore[method-assign]
    try:
        async with connect(fake.url, token(), mode) as client:
            with pytest.raises(MCPError) as info:
                await client.call_tool(SEARCH, SEARCH_ARGS)
    finally:
        del fake_engine.tenant_enabled
    assert info.value.code == -32603
    assert "secret" not in info.value.message and info.value.data is None


@pytest.mark.parametrize("mode", MODES)
async def test_a_store_that_cannot_check_the_tenant_is_store_unavailable(fake, fake_engine, mode):
    """No verdict on the context: a retriable envelope, not -32603 (stop and report).
    A call refused anyway (another purpose) keeps its refusal; tools/list, which has no
    retriable answer, lists the granted tools."""

    def unreachable(tenant):
        raise StoreUnavailable()

    async with connect(fake.url, token(tools=[SEARCH, CAPTURE]), mode) as client:
        fake_engine.tenant_enabled = unreachable  # type: ignore[method-assign]
        try:
            listed = await client.list_tools()
            read = await client.call_tool(SEARCH, SEARCH_ARGS)
            write = await client.call_tool(CAPTURE, capture_args())
            with pytest.raises(MCPError) as refused:
                await client.call_tool(SEARCH, {**SEARCH_ARGS, "purpose_ref": "purpose:other"})
        finally:
            del fake_engine.tenant_enabled
    for result in (read, write):
        assert result.structured_content["error"] == {
            "code": "STORE_UNAVAILABLE",
            "message": MESSAGES[ErrorCode.STORE_UNAVAILABLE],
            "retriable": True,
        }
    assert (refused.value.code, refused.value.message) == CTX
    assert sorted(t.name for t in listed.tools) == [CAPTURE, SEARCH]


@pytest.mark.parametrize("mode", MODES)
async def test_rate_limited_per_principal(fake, mode):
    tok = token()
    async with connect(fake.url, tok, mode) as client:
        codes = []
        for _ in range(12):
            result = await client.call_tool(CAPTURE, capture_args())
            codes.append(result.structured_content.get("error", {}).get("code", "ok"))
        assert codes[:8] == ["ok"] * 8
        assert "RATE_LIMITED" in codes[8:]
        limited = [r for r in codes if r == "RATE_LIMITED"]
        assert limited
    # Another principal is not affected.
    async with connect(fake.url, token(), mode) as client:
        result = await client.call_tool(CAPTURE, capture_args())
        assert result.structured_content["ok"] is True


@pytest.mark.parametrize("mode", MODES)
async def test_deadline(fake, fake_engine, mode):
    def slow(ctx, args):
        time.sleep(0.6)
        raise ContractError(ErrorCode.NOT_FOUND)

    fake_engine.behaviour[SEARCH] = slow
    fake_engine.behaviour[WITHDRAW] = slow
    async with connect(fake.url, token(deadline_ms=150), mode) as client:
        read = await client.call_tool(SEARCH, SEARCH_ARGS)
        write = await client.call_tool(WITHDRAW, {"candidate_id": "c", "idempotency_key": "k" * 16, "reason_ref": "r"})
    assert read.structured_content["error"]["code"] == "DEADLINE_EXCEEDED"
    assert read.structured_content["error"]["retriable"] is True
    assert write.structured_content["error"]["code"] == "MUTATION_OUTCOME_UNKNOWN"
    time.sleep(0.8)  # the abandoned workers finish meanwhile: they must not audit as well
    lines = [json.loads(line) for line in (fake.data_dir / "audit.jsonl").read_text().splitlines()]
    for result in (read, write):
        (line,) = [x for x in lines if x["auditId"] == result.structured_content["auditId"]]
        assert line["code"] == result.structured_content["error"]["code"]
        assert line["response_digest"] == audit_text_digest("response", result.content[0].text)


@pytest.mark.parametrize("mode", MODES)
async def test_audit_log_holds_no_content(fake, mode):
    marker = f"zebra-quartz-{mode}-marker"
    tok = token()
    async with connect(fake.url, tok, mode) as client:
        result = await client.call_tool(CAPTURE, capture_args(text=marker))
        audit_id = result.structured_content["auditId"]
        with pytest.raises(MCPError):
            await client.call_tool(SEARCH, {"query": marker, "purpose_ref": "wrong"})
    raw = (fake.data_dir / "audit.jsonl").read_text()
    assert marker not in raw
    lines = [json.loads(line) for line in raw.splitlines()]
    (mine,) = [line for line in lines if line["auditId"] == audit_id]
    assert mine["tool"] == CAPTURE and mine["code"] == "ok"
    assert mine["tenant"] == "acme" and mine["workspace"] == "ws1"
    assert mine["arguments_digest"].startswith("sha256:")
    # the response digest pins the very text the caller was sent
    assert mine["response_digest"] == audit_text_digest("response", result.content[0].text)
    assert set(mine) == {
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
    }
    assert mine["receipt_digest"] is None  # only a search's answer carries a rank receipt
    assert any(line["code"] == "-32603" and line["tool"] == SEARCH for line in lines)


@pytest.mark.parametrize("mode", MODES)
async def test_each_call_checks_its_tenant_once_and_leaves_one_audit_line(fake, fake_engine, mode):
    """One pipeline: whatever ends a call (an answer, a refusal before the engine, an
    engine fault, the rate limit), its tenant was asked once and it has one audit line."""
    asked: list[str] = []
    enabled = fake_engine.tenant_enabled

    def counted(tenant):
        asked.append(tenant)
        return enabled(tenant)

    fake_engine.tenant_enabled = counted  # type: ignore[method-assign]
    fake_engine.behaviour[SEARCH] = _boom
    ids = []
    try:
        async with connect(fake.url, token(), mode) as client:
            await client.list_tools()  # which the client does once anyway, to check results
            asked.clear()
            for _ in range(9):  # the ninth is past the burst of eight
                ids.append((await client.call_tool(CAPTURE, capture_args())).structured_content["auditId"])
            ids.append((await client.call_tool(SEARCH, SEARCH_ARGS)).structured_content["auditId"])
            for tool, args in [(SEARCH, {**SEARCH_ARGS, "purpose_ref": "other"}), ("engram_memory_admin", {})]:
                with pytest.raises(MCPError):
                    await client.call_tool(tool, args)
    finally:
        del fake_engine.tenant_enabled
    assert asked == ["acme"] * 12
    lines = [json.loads(line) for line in (fake.data_dir / "audit.jsonl").read_text().splitlines()]
    assert all(sum(line["auditId"] == audit_id for line in lines) == 1 for audit_id in ids)
