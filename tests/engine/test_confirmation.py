"""The confirmation gate through the engine: withdraw and forget always need a usable
human confirmation; capture and request_admission only where the host says so."""

from __future__ import annotations

import pytest
from engine_support import (
    CAPTURE,
    FORGET,
    REQUEST_ADMISSION,
    WITHDRAW,
    ErrorCode,
    accept,
    admit,
    capture,
    capture_args,
    confirmed,
    context,
    error_of,
    forget_args,
    get,
    key,
    withdraw_args,
)

from engram.service.engine import CallContext, Confirmation
from engram.service.engine.clock import now_ms
from engram.service.engine.gates import operation_digest

GATE = ErrorCode.GATE_FAILED


def with_confirmation(ctx: CallContext, **fields) -> CallContext:
    return CallContext(**{**ctx.__dict__, "confirmation": Confirmation(**fields)})


def target_for(engine, ctx, tool: str) -> tuple[str, dict]:
    """A fresh target and its arguments for withdraw (pending candidate) or forget (record)."""
    if tool == WITHDRAW:
        _, cap = capture(engine, ctx, f"A pending draft about the kite runner {key()}.")
        return cap["candidate_id"], withdraw_args(cap["candidate_id"])
    rid = accept(engine, ctx, f"An accepted record about the kite runner {key()}.")
    return rid, forget_args(rid)


def state_of(engine, ctx, tool: str, target: str) -> str:
    with engine.deps.store.reader() as tx:
        row = tx.candidate(ctx.scope, target) if tool == WITHDRAW else tx.record(ctx.scope, target)
    return row.state


def good(ctx, tool, target, args, **overrides) -> CallContext:
    now = now_ms()
    fields = dict(
        ref=f"ref-{key()}",
        capability=tool,
        target=target,
        operation_digest=operation_digest(tool, args),
        approved_at_ms=now,
        expires_at_ms=now + 120_000,
    )
    fields.update(overrides)
    return with_confirmation(ctx, **fields)


BAD = {
    "missing": lambda ctx, tool, target, args: ctx,
    "expired": lambda ctx, tool, target, args: good(
        ctx, tool, target, args, approved_at_ms=now_ms() - 10_000, expires_at_ms=now_ms() - 5_000
    ),
    "approved more than 30 s ago": lambda ctx, tool, target, args: good(
        ctx, tool, target, args, approved_at_ms=now_ms() - 31_000, expires_at_ms=now_ms() + 200_000
    ),
    "ttl over 300 s": lambda ctx, tool, target, args: good(
        ctx, tool, target, args, expires_at_ms=now_ms() + 300_001 + 1_000
    ),
    "expires before approval": lambda ctx, tool, target, args: good(
        ctx, tool, target, args, expires_at_ms=now_ms() - 1
    ),
    "approved in the future": lambda ctx, tool, target, args: good(
        ctx, tool, target, args, approved_at_ms=now_ms() + 60_000, expires_at_ms=now_ms() + 120_000
    ),
    "wrong target": lambda ctx, tool, target, args: good(ctx, tool, target + "x", args),
    "wrong operation digest": lambda ctx, tool, target, args: good(
        ctx, tool, target, args, operation_digest=operation_digest(tool, {**args, "reason_ref": "other"})
    ),
    "digest of another tool": lambda ctx, tool, target, args: good(
        ctx, tool, target, args, operation_digest=operation_digest(CAPTURE, args)
    ),
    "wrong capability": lambda ctx, tool, target, args: good(
        ctx, tool, target, args, capability=FORGET if tool == WITHDRAW else WITHDRAW
    ),
    "empty ref": lambda ctx, tool, target, args: good(ctx, tool, target, args, ref=""),
}


@pytest.mark.parametrize("tool", [WITHDRAW, FORGET])
@pytest.mark.parametrize("case", sorted(BAD))
def test_unusable_confirmation_is_gate_failed(engine, tool: str, case: str) -> None:
    ctx = context()
    target, args = target_for(engine, ctx, tool)
    before = state_of(engine, ctx, tool, target)
    cursor = engine.deps.store.scope_cursor(ctx.scope)
    err = error_of(engine.execute, tool, BAD[case](ctx, tool, target, args), args)
    assert err.code is GATE and not err.retriable
    assert state_of(engine, ctx, tool, target) == before
    assert engine.deps.store.scope_cursor(ctx.scope) == cursor
    # the key was not consumed: the same call with a good confirmation goes through
    out = engine.execute(tool, good(ctx, tool, target, args), args)
    assert out["replayed"] is False


@pytest.mark.parametrize("tool", [WITHDRAW, FORGET])
def test_boundaries_that_are_still_usable(engine, tool: str) -> None:
    ctx = context()
    for overrides in (
        {"approved_at_ms": now_ms() - 25_000, "expires_at_ms": now_ms() + 100_000},  # within 30 s
        {"approved_at_ms": now_ms(), "expires_at_ms": now_ms() + 300_000},  # TTL exactly 300 s
        {"approved_at_ms": now_ms() + 2_000, "expires_at_ms": now_ms() + 60_000},  # small skew
    ):
        target, args = target_for(engine, ctx, tool)
        out = engine.execute(tool, good(ctx, tool, target, args, **overrides), args)
        assert out["replayed"] is False
        assert out["receipt"]["to_state"] == ("withdrawn" if tool == WITHDRAW else "tombstoned")
        assert state_of(engine, ctx, tool, target) == out["receipt"]["to_state"]


@pytest.mark.parametrize("tool", [WITHDRAW, FORGET])
def test_a_confirmation_is_used_once(engine, tool: str) -> None:
    ctx = context()
    first, first_args = target_for(engine, ctx, tool)
    second, second_args = target_for(engine, ctx, tool)
    engine.execute(tool, good(ctx, tool, first, first_args, ref="ref-once"), first_args)
    err = error_of(engine.execute, tool, good(ctx, tool, second, second_args, ref="ref-once"), second_args)
    assert err.code is GATE
    assert state_of(engine, ctx, tool, second) in ("pending", "accepted_current")


def test_a_refused_attempt_does_not_burn_the_confirmation(engine) -> None:
    ctx = context()
    rid, args = target_for(engine, ctx, FORGET)
    ctx_wrong = good(
        ctx, FORGET, rid, args, ref="ref-keep", operation_digest=operation_digest(FORGET, {**args, "reason_ref": "x"})
    )
    assert error_of(engine.execute, FORGET, ctx_wrong, args).code is GATE
    assert state_of(engine, ctx, FORGET, rid) == "accepted_current"
    out = engine.execute(FORGET, good(ctx, FORGET, rid, args, ref="ref-keep"), args)
    assert out["receipt"]["to_state"] == "tombstoned"
    assert state_of(engine, ctx, FORGET, rid) == "tombstoned"


def test_the_factory_confirmation_works(engine) -> None:
    ctx = context()
    rid, args = target_for(engine, ctx, FORGET)
    out = engine.execute(FORGET, confirmed(ctx, FORGET, rid, args), args)
    assert out["receipt"]["to_state"] == "tombstoned"
    assert error_of(get, engine, ctx, rid).code is ErrorCode.NOT_FOUND


# -- capture and request_admission: only where the host marks them -----------------------------------


def test_capture_needs_no_confirmation_by_default(engine) -> None:
    assert engine.execute(CAPTURE, context(), capture_args("No confirmation needed."))["status"] == "committed_pending"


def test_capture_marked_confirmation_required(engine) -> None:
    ctx = context(confirm=frozenset({CAPTURE}))
    args = capture_args("Confirmation needed.")
    assert error_of(engine.execute, CAPTURE, ctx, args).code is GATE
    wrong_target = good(ctx, CAPTURE, "idem-key-some-other-key", args)
    assert error_of(engine.execute, CAPTURE, wrong_target, args).code is GATE
    other_content = capture_args("Other content.", idempotency_key=args["idempotency_key"])
    mismatched = good(ctx, CAPTURE, args["idempotency_key"], other_content)
    assert error_of(engine.execute, CAPTURE, mismatched, args).code is GATE
    assert engine.deps.store.scope_cursor(ctx.scope) == 0
    out = engine.execute(CAPTURE, confirmed(ctx, CAPTURE, args["idempotency_key"], args), args)
    assert out["status"] == "committed_pending"
    # marking capture does not mark admission
    assert admit(engine, ctx, out["candidate_id"])["outcome"]["status"] == "accepted"


def test_admission_marked_confirmation_required(engine) -> None:
    ctx = context(confirm=frozenset({REQUEST_ADMISSION}))
    _, cap = capture(engine, ctx, "Admission confirmation needed.")
    args = {"candidate_id": cap["candidate_id"], "idempotency_key": key("adm")}
    assert error_of(engine.execute, REQUEST_ADMISSION, ctx, args).code is GATE
    wrong = good(ctx, REQUEST_ADMISSION, cap["candidate_id"], args, capability=CAPTURE)
    assert error_of(engine.execute, REQUEST_ADMISSION, wrong, args).code is GATE
    with engine.deps.store.reader() as tx:
        assert tx.candidate(ctx.scope, cap["candidate_id"]).state == "pending"
    out = engine.execute(REQUEST_ADMISSION, good(ctx, REQUEST_ADMISSION, cap["candidate_id"], args), args)
    assert out["outcome"]["status"] == "accepted"


def test_marking_withdraw_changes_nothing(engine) -> None:
    ctx = context(confirm=frozenset({WITHDRAW, FORGET}))
    target, args = target_for(engine, ctx, WITHDRAW)
    assert error_of(engine.execute, WITHDRAW, ctx, args).code is GATE
    engine.execute(WITHDRAW, good(ctx, WITHDRAW, target, args), args)
