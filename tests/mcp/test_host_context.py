"""Unit tests of host-context verification (service/mcp/host_context.py)."""

from __future__ import annotations

import json
import os
import stat
import time

import jwt
import pytest
from mcp_support import SECRET, claims
from starlette.datastructures import Headers

from engram.models.host_token import HEADER, mint_token
from engram.models.tools import CAPTURE, FORGET, GET, REQUEST_ADMISSION, SEARCH, TOOLS
from engram.service.mcp.host_context import (
    ContextUnavailable,
    HeaderBinding,
    StaticBinding,
    VerifiedContext,
    binding_from_env,
    check_purpose,
    context_from_claims,
    create_host_secret,
    load_host_secret,
    verify_token,
)

NOW = 1_800_000_000


def test_roundtrip():
    confirmation = {
        "ref": "c1",
        "capability": FORGET,
        "target": "mem_a",
        "operation_digest": "sha256:" + "0" * 64,
        "approved_at": NOW * 1000,
        "expires_at": NOW * 1000 + 60_000,
    }
    tok = mint_token(
        claims(confirm=[CAPTURE], deadline_ms=500, confirmation=confirmation, tools=[SEARCH, "x"]), SECRET, now_s=NOW
    )
    verified = verify_token(tok, SECRET, now_s=NOW + 1)
    ctx = verified.context
    assert (ctx.tenant, ctx.workspace, ctx.purpose) == ("acme", "ws1", "purpose:test")
    assert ctx.tools == frozenset({SEARCH})  # unknown names dropped
    assert ctx.confirm == frozenset({CAPTURE})
    assert ctx.deadline_ms == 500
    assert ctx.confirmation.approved_at_ms == NOW * 1000
    assert ctx.confirmation.capability == FORGET
    assert verified.expires_at_s == NOW + 300


def test_a_token_verified_once_is_still_judged_by_the_clock_and_the_secret_every_time():
    tok = mint_token(claims(), SECRET, now_s=NOW)
    assert verify_token(tok, SECRET, now_s=NOW + 1).context.tenant == "acme"
    assert _reject(tok, now=NOW + 300) == "expired"  # same token, later clock
    assert _reject(tok, now=NOW - 120) == "expired"  # issued in the future for this clock
    assert _reject(tok, secret=b"another-secret-0123456789abcdef-0123456789") == "signature"
    assert verify_token(tok, SECRET, now_s=NOW + 2).context.tenant == "acme"


def _reject(tok, now=NOW + 1, secret=SECRET):
    with pytest.raises(ContextUnavailable) as info:
        verify_token(tok, secret, now_s=now)
    assert str(info.value) == "Trusted invocation context unavailable"
    return info.value.reason


def test_rejections():
    good = mint_token(claims(), SECRET, now_s=NOW)
    assert _reject(None)
    assert _reject("")
    assert _reject("a.b.c")
    assert _reject(good, secret=b"x" * 40)
    assert _reject(good, now=NOW + 301) == "expired"
    assert _reject(good, now=NOW - 60) == "expired"  # issued in the future
    assert _reject(jwt.encode({**claims(), "iat": NOW, "exp": NOW + 60}, None, algorithm="none"))
    assert _reject(
        jwt.encode({**claims(), "iat": NOW, "exp": NOW + 60}, SECRET + b"-padding-for-hs384-key", algorithm="HS384")
    )
    assert _reject(jwt.encode({**claims()}, SECRET, algorithm="HS256"))  # no iat/exp
    assert _reject(mint_token(claims(), SECRET, now_s=NOW, ttl_s=90_000))
    header, body, sig = good.split(".")
    assert _reject(".".join([header, body[:-2] + "AA", sig]))
    assert _reject(good + "x")
    assert _reject("x" * 20_000)


@pytest.mark.parametrize(
    "bad",
    [
        {"tenant": ""},
        {"tenant": 5},
        {"workspace": None},
        {"principal": "x" * 300},
        {"purpose": "p" * 513},
        {"tools": "engram_memory_search"},
        {"tools": [1]},
        {"confirm": [FORGET]},
        {"confirm": "engram_memory_capture"},
        {"deadline_ms": 0},
        {"deadline_ms": 10**9},
        {"deadline_ms": True},
        {"confirmation": {"ref": "r"}},
        {"confirmation": "yes"},
        {"extra": 1},
    ],
)
def test_bad_claims(bad):
    body = claims()
    for key, value in bad.items():
        if value is None:
            body.pop(key)
        else:
            body[key] = value
    with pytest.raises(ContextUnavailable):
        context_from_claims(body)


def test_confirmation_instants_are_epoch_ms_integers():
    base = {"ref": "c", "capability": FORGET, "target": "t", "operation_digest": "d"}
    ok = context_from_claims(claims(confirmation={**base, "approved_at": 1, "expires_at": 2}))
    assert ok.confirmation.expires_at_ms == 2
    with pytest.raises(ContextUnavailable):
        context_from_claims(claims(confirmation={**base, "approved_at": "2024-01-01T00:00:00.000Z", "expires_at": 2}))


def test_header_binding():
    binding = HeaderBinding(SECRET)

    class Req:
        def __init__(self, raw):
            self.headers = Headers(raw=raw)

    tok = mint_token(claims(), SECRET).encode()
    assert binding.resolve(Req([(b"x-engram-context", tok)])).tenant == "acme"
    with pytest.raises(ContextUnavailable):
        binding.resolve(Req([]))
    with pytest.raises(ContextUnavailable):  # repeated header: ambiguous
        binding.resolve(Req([(b"x-engram-context", tok), (b"x-engram-context", tok)]))
    with pytest.raises(ContextUnavailable):
        binding.resolve(None)
    assert HEADER == "X-Engram-Context"


def test_purpose_check():
    ctx = context_from_claims(claims())
    check_purpose(ctx, TOOLS[SEARCH], {"purpose_ref": "purpose:test"})
    check_purpose(ctx, TOOLS[GET], {})  # absent: left to schema validation
    check_purpose(ctx, TOOLS[CAPTURE], {"payload": {"purpose_ref": "purpose:test"}})
    check_purpose(ctx, TOOLS[CAPTURE], {"payload": "not an object"})  # left to schema validation
    check_purpose(ctx, TOOLS[REQUEST_ADMISSION], {"purpose_ref": "anything"})  # no purpose_ref in its schema
    for tool, args in [
        (SEARCH, {"purpose_ref": "other"}),
        (GET, {"purpose_ref": None}),
        (CAPTURE, {"payload": {"purpose_ref": "other"}}),
        (SEARCH, {"purpose_ref": "purpose:test "}),
    ]:
        with pytest.raises(ContextUnavailable):
            check_purpose(ctx, TOOLS[tool], args)


def test_host_secret_file(tmp_path, monkeypatch):
    monkeypatch.delenv("ENGRAM_HOST_SECRET", raising=False)
    with pytest.raises(RuntimeError):
        load_host_secret(tmp_path)
    path, created = create_host_secret(tmp_path)
    assert created and stat.S_IMODE(path.stat().st_mode) == 0o600
    assert create_host_secret(tmp_path) == (path, False)
    secret = load_host_secret(tmp_path)
    assert len(secret) == 64
    os.chmod(path, 0o644)
    with pytest.raises(RuntimeError):
        load_host_secret(tmp_path)
    assert load_host_secret(None, {"ENGRAM_HOST_SECRET": "e" * 40}) == b"e" * 40
    with pytest.raises(RuntimeError):
        load_host_secret(None, {"ENGRAM_HOST_SECRET": "short"})


def test_stdio_binding(tmp_path):
    tok = mint_token(claims(), SECRET)
    assert binding_from_env({"ENGRAM_CONTEXT": tok}, SECRET).resolve(None).tenant == "acme"
    with pytest.raises(ContextUnavailable):
        binding_from_env({"ENGRAM_CONTEXT": tok}, b"y" * 40)
    path = tmp_path / "ctx.json"
    path.write_text(json.dumps(claims(workspace="ws9")))
    assert binding_from_env({"ENGRAM_CONTEXT_FILE": str(path)}, None).resolve(None).workspace == "ws9"
    with pytest.raises(ContextUnavailable):
        binding_from_env({}, SECRET)
    verified = binding_from_env({"ENGRAM_CONTEXT": tok}, SECRET)._verified
    lapsed = StaticBinding(VerifiedContext(verified.context, time.time() - 0.001))
    with pytest.raises(ContextUnavailable):  # the JWT's exp still ends a launch-time binding
        lapsed.resolve(None)
