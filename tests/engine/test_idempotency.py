"""Idempotency: replays are the first result, conflicts are DIGEST_CONFLICT, keys belong
to a principal in a scope, and concurrent retries commit exactly once."""

from __future__ import annotations

import threading
import time

import pytest
from engine_support import (
    CAPTURE,
    FORGET,
    REQUEST_ADMISSION,
    WITHDRAW,
    ContractError,
    ErrorCode,
    accept,
    admit,
    canonical,
    capture,
    capture_args,
    confirmed,
    context,
    error_of,
    forget,
    forget_args,
    key,
    withdraw,
    withdraw_args,
)

from engram.models.envelope import envelope_text, success_envelope
from engram.models.outputs import AdmissionOutput, CaptureOutput, ForgetOutput, WithdrawOutput
from engram.service.engine import transitions
from engram.service.engine.clock import instant, now_ms

CONFLICT = ErrorCode.DIGEST_CONFLICT
AUDIT = "aud_" + "0" * 32


def wire(value: dict) -> bytes:
    """The bytes a front end sends for this result (key order included)."""
    return envelope_text(success_envelope(value, AUDIT)).encode()


def event_count(engine, ctx, kind: str | None = None) -> int:
    return sum(1 for e in engine.deps.store.events(ctx.scope) if kind is None or e.kind == kind)


def candidate_count(engine) -> int:
    store = engine.deps.store
    return sum(sum(store.state_counts(scope).candidates.values()) for scope in store.scopes())


# -- replays -------------------------------------------------------------------------------


def test_capture_replay_is_the_first_result(engine) -> None:
    ctx = context()
    args, first = capture(engine, ctx, "The kea cluster runs three replicas.")
    events = event_count(engine, ctx)
    for _ in range(2):
        again = engine.execute(CAPTURE, ctx, args)
        CaptureOutput.model_validate(again)
        assert again["status"] == "duplicate_exact"
        assert canonical({**again, "status": "committed_pending"}) == canonical(first)
        assert wire(again) == wire({**first, "status": "duplicate_exact"})
    assert event_count(engine, ctx) == events
    assert candidate_count(engine) == 1


def test_capture_replay_after_admission_still_replays(engine) -> None:
    ctx = context()
    args, first = capture(engine, ctx, "The kea cluster runs three replicas.")
    rid = admit(engine, ctx, first["candidate_id"])["outcome"]["record_id"]
    forget(engine, ctx, rid)
    assert engine.execute(CAPTURE, ctx, args) == {**first, "status": "duplicate_exact"}


def test_capture_replay_reuses_the_first_retention(engine) -> None:
    ctx = context()
    args = capture_args("The kea flag expires.")
    expires = now_ms() + 1200
    args["payload"]["retention"] = {"derivative_rule": "make-ineligible", "expires_at": instant(expires)}
    first = engine.execute(CAPTURE, ctx, args)
    time.sleep(max(0, expires - now_ms()) / 1000 + 0.05)
    # a fresh capture with this expiry would now be INVALID_SCHEMA; the retry is a replay
    assert engine.execute(CAPTURE, ctx, args) == {**first, "status": "duplicate_exact"}
    fresh = {**args, "idempotency_key": key("cap")}
    assert error_of(engine.execute, CAPTURE, ctx, fresh).code is ErrorCode.INVALID_SCHEMA


def test_admission_replay(engine) -> None:
    ctx = context()
    _, cap = capture(engine, ctx, "The kea cluster runs three replicas.")
    args = {"candidate_id": cap["candidate_id"], "idempotency_key": key("adm")}
    first = engine.execute(REQUEST_ADMISSION, ctx, args)
    events = event_count(engine, ctx)
    again = engine.execute(REQUEST_ADMISSION, ctx, args)
    AdmissionOutput.model_validate(again)
    assert first["replayed"] is False and again["replayed"] is True
    assert canonical({**again, "replayed": False}) == canonical(first)
    assert wire(again) == wire({**first, "replayed": True})
    assert event_count(engine, ctx) == events
    # still a replay after the record was forgotten
    forget(engine, ctx, first["outcome"]["record_id"])
    assert engine.execute(REQUEST_ADMISSION, ctx, args) == again


def test_rejected_admission_replay(make_engine) -> None:
    engine = make_engine(admission_policy={"allowed_locator_schemes": ["doc"]})
    ctx = context()
    _, cap = capture(engine, ctx, "Refused by policy.")
    args = {"candidate_id": cap["candidate_id"], "idempotency_key": key("adm")}
    first = engine.execute(REQUEST_ADMISSION, ctx, args)
    assert first["outcome"]["status"] == "rejected"
    assert engine.execute(REQUEST_ADMISSION, ctx, args) == {**first, "replayed": True}


def test_withdraw_replay(engine) -> None:
    ctx = context()
    _, cap = capture(engine, ctx, "A draft.")
    args = withdraw_args(cap["candidate_id"])
    conf_ctx = confirmed(ctx, WITHDRAW, cap["candidate_id"], args)
    first = engine.execute(WITHDRAW, conf_ctx, args)
    events = event_count(engine, ctx)
    # the same (already used) confirmation, or none: a replay performs no new effect
    for replay_ctx in (conf_ctx, ctx):
        again = engine.execute(WITHDRAW, replay_ctx, args)
        WithdrawOutput.model_validate(again)
        assert again["replayed"] is True
        assert canonical({**again, "replayed": False}) == canonical(first)
        assert wire(again) == wire({**first, "replayed": True})
    assert event_count(engine, ctx) == events


def test_forget_replay(engine) -> None:
    ctx = context()
    rid = accept(engine, ctx, "Obsolete knowledge about the kea cluster.")
    args = forget_args(rid)
    first = forget(engine, ctx, rid, args)
    again = engine.execute(FORGET, ctx, args)
    ForgetOutput.model_validate(again)
    assert again["replayed"] is True
    assert canonical({**again, "replayed": False}) == canonical(first)
    assert wire(again) == wire({**first, "replayed": True})


# -- the physical part may be interrupted: a replay must still be a well-formed answer ---------


class Crash(Exception):
    pass


def crash(*_args, **_kwargs):
    raise Crash()


def test_forget_replay_after_a_crash_before_the_purge(engine, monkeypatch) -> None:
    ctx = context()
    rid = accept(engine, ctx, "Obsolete knowledge about the kea cluster.")
    args = forget_args(rid)
    monkeypatch.setattr(transitions, "invalidate", crash)
    with pytest.raises(Crash):
        forget(engine, ctx, rid, args)
    monkeypatch.undo()
    again = engine.execute(FORGET, ctx, args)  # the committed tombstone is replayed
    ForgetOutput.model_validate(again)
    assert again["replayed"] is True
    assert again["projection_invalidation"] in ("pending", "complete")
    assert again["receipt"]["to_state"] == "tombstoned"


def test_withdraw_replay_after_a_crash_before_the_purge(engine, monkeypatch) -> None:
    ctx = context()
    _, cap = capture(engine, ctx, "A draft.")
    args = withdraw_args(cap["candidate_id"])
    monkeypatch.setattr(engine.deps.store, "purge_freed_pages", crash)
    with pytest.raises(Crash):
        withdraw(engine, ctx, cap["candidate_id"], args)
    monkeypatch.undo()
    again = engine.execute(WITHDRAW, ctx, args)
    WithdrawOutput.model_validate(again)
    assert again["replayed"] is True and again["key_destruction"] in ("pending", "complete")


# -- conflicts -------------------------------------------------------------------------------


def test_capture_same_key_other_content_conflicts(engine) -> None:
    ctx = context()
    args, _ = capture(engine, ctx, "The kea cluster runs three replicas.")
    other = capture_args("The kea cluster runs five replicas.", idempotency_key=args["idempotency_key"])
    events = event_count(engine, ctx)
    assert error_of(engine.execute, CAPTURE, ctx, other).code is CONFLICT
    subtle = capture_args("The kea cluster runs three replicas.", idempotency_key=args["idempotency_key"])
    subtle["evidence"]["evidence_ref"] = "ev:2"
    assert error_of(engine.execute, CAPTURE, ctx, subtle).code is CONFLICT
    assert event_count(engine, ctx) == events


def test_admission_same_key_other_target_conflicts(engine) -> None:
    ctx = context()
    _, a = capture(engine, ctx, "First candidate.")
    _, b = capture(engine, ctx, "Second candidate.")
    idem = key("adm")
    admit(engine, ctx, a["candidate_id"], idem)
    assert error_of(admit, engine, ctx, b["candidate_id"], idem).code is CONFLICT
    # b is untouched and can still be admitted with its own key
    assert admit(engine, ctx, b["candidate_id"])["outcome"]["status"] == "accepted"


def test_withdraw_same_key_other_reason_or_target_conflicts(engine) -> None:
    ctx = context()
    _, a = capture(engine, ctx, "First draft.")
    _, b = capture(engine, ctx, "Second draft.")
    args = withdraw_args(a["candidate_id"])
    withdraw(engine, ctx, a["candidate_id"], args)
    other_reason = {**args, "reason_ref": "reason:other"}
    assert error_of(withdraw, engine, ctx, a["candidate_id"], other_reason).code is CONFLICT
    other_target = {**args, "candidate_id": b["candidate_id"]}
    assert error_of(withdraw, engine, ctx, b["candidate_id"], other_target).code is CONFLICT


def test_forget_same_key_other_record_conflicts(engine) -> None:
    ctx = context()
    a = accept(engine, ctx, "First record.")
    b = accept(engine, ctx, "Second record.")
    args = forget_args(a)
    forget(engine, ctx, a, args)
    assert error_of(forget, engine, ctx, b, {**args, "record_id": b}).code is CONFLICT
    assert error_of(forget, engine, ctx, a, {**args, "reason_ref": "reason:x"}).code is CONFLICT


def test_same_key_other_tool_conflicts(engine) -> None:
    ctx = context()
    cap_args, cap = capture(engine, ctx, "A candidate.")
    shared = cap_args["idempotency_key"]
    assert error_of(admit, engine, ctx, cap["candidate_id"], shared).code is CONFLICT
    wargs = {"candidate_id": cap["candidate_id"], "idempotency_key": shared, "reason_ref": "r"}
    assert error_of(withdraw, engine, ctx, cap["candidate_id"], wargs).code is CONFLICT
    adm_key = key("adm")
    out = admit(engine, ctx, cap["candidate_id"], adm_key)
    rid = out["outcome"]["record_id"]
    fargs = {"record_id": rid, "idempotency_key": adm_key, "reason_ref": "r"}
    assert error_of(forget, engine, ctx, rid, fargs).code is CONFLICT
    # a capture whose key was first used by admission conflicts too
    assert (
        error_of(engine.execute, CAPTURE, ctx, capture_args("A candidate.", idempotency_key=adm_key)).code is CONFLICT
    )


def test_a_refused_call_reserves_nothing(engine) -> None:
    ctx = context()
    idem = key("cap")
    bad = capture_args("Keep it.", idempotency_key=idem)
    bad["payload"]["retention"] = {"derivative_rule": "retain"}
    assert error_of(engine.execute, CAPTURE, ctx, bad).code is ErrorCode.UNAUTHORIZED
    assert (
        engine.execute(CAPTURE, ctx, capture_args("Other content.", idempotency_key=idem))["status"]
        == "committed_pending"
    )


# -- keys are per principal and per scope ---------------------------------------------------------


def test_keys_are_per_principal(engine) -> None:
    alice, bob = context(principal="alice"), context(principal="bob")
    args, a = capture(engine, alice, "Alice's note.")
    same = engine.execute(CAPTURE, bob, args)
    assert same["status"] == "committed_pending" and same["candidate_id"] != a["candidate_id"]
    other = engine.execute(CAPTURE, bob, capture_args("Bob's other note.", idempotency_key=key("x")))
    assert other["status"] == "committed_pending"
    bob_args = capture_args("Bob's note.", idempotency_key=args["idempotency_key"])
    # bob's key is now taken by his first capture, not by alice's
    assert error_of(engine.execute, CAPTURE, bob, bob_args).code is CONFLICT
    assert engine.execute(CAPTURE, alice, args)["candidate_id"] == a["candidate_id"]


def test_keys_are_per_scope(engine) -> None:
    here, there = context(workspace="one"), context(workspace="two")
    args, a = capture(engine, here, "A note.")
    b = engine.execute(CAPTURE, there, args)
    assert b["status"] == "committed_pending" and b["candidate_id"] != a["candidate_id"]


# -- concurrency -----------------------------------------------------------------------------------


def run_threads(n: int, fn) -> list:
    barrier = threading.Barrier(n)
    results: list = [None] * n

    def worker(i: int) -> None:
        barrier.wait()
        try:
            results[i] = fn()
        except ContractError as exc:
            results[i] = exc.code
        except Exception as exc:  # surfaced by the assertions below
            results[i] = exc

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return results


def test_concurrent_captures_with_one_key_commit_once(engine) -> None:
    ctx = context()
    args = capture_args("Concurrent retries of one capture.")
    results = run_threads(8, lambda: engine.execute(CAPTURE, ctx, args))
    assert all(isinstance(r, dict) for r in results), results
    assert sorted(r["status"] for r in results) == ["committed_pending"] + ["duplicate_exact"] * 7
    assert len({r["candidate_id"] for r in results}) == 1
    assert event_count(engine, ctx, "candidate_captured") == 1
    assert candidate_count(engine) == 1


def test_concurrent_admissions_with_one_key_commit_once(engine) -> None:
    ctx = context()
    _, cap = capture(engine, ctx, "Concurrent retries of one admission.")
    args = {"candidate_id": cap["candidate_id"], "idempotency_key": key("adm")}
    results = run_threads(8, lambda: engine.execute(REQUEST_ADMISSION, ctx, args))
    assert all(isinstance(r, dict) for r in results), results
    assert sorted(r["replayed"] for r in results) == [False] + [True] * 7
    assert len({r["outcome"]["record_id"] for r in results}) == 1
    assert event_count(engine, ctx, "record_accepted") == 1


def test_concurrent_admissions_with_different_keys_accept_once(engine) -> None:
    ctx = context()
    _, cap = capture(engine, ctx, "Racing admissions of one candidate.")
    results = run_threads(6, lambda: admit(engine, ctx, cap["candidate_id"]))
    accepted = [r for r in results if isinstance(r, dict)]
    assert len(accepted) == 1 and accepted[0]["outcome"]["status"] == "accepted"
    assert sorted(map(str, (r for r in results if not isinstance(r, dict)))) == ["ALREADY_TERMINAL"] * 5
    assert event_count(engine, ctx, "record_accepted") == 1
