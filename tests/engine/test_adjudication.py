"""Candidates held for adjudication are decided by an operator, never by the agent."""

from __future__ import annotations

import pytest
from engine_support import (
    ContractError,
    ErrorCode,
    accept,
    admit,
    capture,
    context,
    forget,
    search_ids,
)


def _held(engine, ctx, text: str) -> str:
    """A candidate held as pending_adjudication: its content equals a forgotten record."""
    forget(engine, ctx, accept(engine, ctx, text))
    _, cap = capture(engine, ctx, text)
    assert admit(engine, ctx, cap["candidate_id"])["outcome"]["status"] == "pending_adjudication"
    return cap["candidate_id"]


def test_operator_accepts_a_held_candidate_under_a_new_record_id(engine) -> None:
    ctx = context()
    candidate = _held(engine, ctx, "the gantry crane inspection moved to mondays")
    outcome = engine.operator.adjudicate(ctx.scope, candidate, "accept", "reason:reviewed")
    assert outcome["status"] == "accepted" and outcome["record_id"].startswith("mem_")
    assert outcome["record_id"] in search_ids(engine, ctx, "gantry crane inspection")
    row = engine.deps.store.records(ctx.scope, [outcome["record_id"]])[outcome["record_id"]]
    assert row.state == "accepted_current"
    with pytest.raises(ContractError) as again:
        engine.operator.adjudicate(ctx.scope, candidate, "reject", "reason:second-thoughts")
    assert again.value.code == ErrorCode.ILLEGAL_TRANSITION


def test_operator_rejects_and_the_body_key_is_destroyed(engine) -> None:
    ctx = context()
    candidate = _held(engine, ctx, "the harbour pilot roster is kept in the blue binder")
    with engine.deps.store.reader() as tx:
        key_id = tx.candidate(ctx.scope, candidate).key_id
    assert engine.deps.store.wrapped_key(key_id) is not None
    assert engine.operator.adjudicate(ctx.scope, candidate, "reject", "reason:stale")["status"] == "rejected"
    assert engine.deps.store.wrapped_key(key_id) is None
    assert search_ids(engine, ctx, "harbour pilot roster") == []


def test_only_held_candidates_in_the_scope_can_be_adjudicated(engine) -> None:
    ctx = context()
    _, pending = capture(engine, ctx, "an ordinary pending candidate")
    with pytest.raises(ContractError) as not_held:
        engine.operator.adjudicate(ctx.scope, pending["candidate_id"], "accept", "reason:x")
    assert not_held.value.code == ErrorCode.ILLEGAL_TRANSITION
    candidate = _held(engine, ctx, "the dredging schedule follows the neap tides")
    with pytest.raises(ContractError) as other_scope:
        engine.operator.adjudicate(("acme", "elsewhere"), candidate, "accept", "reason:x")
    assert other_scope.value.code == ErrorCode.NOT_FOUND
