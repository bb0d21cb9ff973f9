"""The candidate and record lifecycle, admission outcomes, retention and valid time."""

from __future__ import annotations

import json
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
    capture,
    capture_args,
    confirmed,
    context,
    error_of,
    forget,
    get,
    key,
    search,
    search_ids,
    withdraw,
    withdraw_args,
)

from engram.models.digests import record_id_for
from engram.models.outputs import AdmissionOutput, CaptureOutput, ForgetOutput, GetOutput, WithdrawOutput
from engram.service.engine.clock import instant, now_ms
from engram.service.engine.records import candidate_aad
from engram.service.engine.sealing import SealBroken

NOT_FOUND = ErrorCode.NOT_FOUND
DAY = 86_400_000


def candidate_row(engine, ctx, candidate_id):
    with engine.deps.store.reader() as tx:
        return tx.candidate(ctx.scope, candidate_id)


def record_row(engine, ctx, record_id):
    with engine.deps.store.reader() as tx:
        return tx.record(ctx.scope, record_id)


def test_capture_admit_then_search_and_get(engine) -> None:
    ctx = context()
    args, cap = capture(engine, ctx, "We chose PostgreSQL for the billing ledger.")
    CaptureOutput.model_validate(cap)
    assert cap["status"] == "committed_pending" and cap["candidate_id"].startswith("cand_")
    assert candidate_row(engine, ctx, cap["candidate_id"]).state == "pending"
    out = admit(engine, ctx, cap["candidate_id"])
    AdmissionOutput.model_validate(out)
    assert out["replayed"] is False
    assert out["outcome"]["status"] == "accepted"
    rid = out["outcome"]["record_id"]
    assert rid == record_id_for(cap["record_digest"])
    assert candidate_row(engine, ctx, cap["candidate_id"]).state == "accepted"
    assert record_row(engine, ctx, rid).state == "accepted_current"
    assert search_ids(engine, ctx, "PostgreSQL billing") == [rid]
    got = get(engine, ctx, rid)
    GetOutput.model_validate(got)
    record = got["record"]
    assert record["state"] == "accepted_current"
    assert record["components"] == args["payload"]["components"]
    assert record["citations"] == args["payload"]["citations"]
    assert record["retention"] == {"derivative_rule": "make-ineligible"}
    assert int(record["accepted_cursor"]) == int(out["outcome"]["cursor"])


def test_disclosure_is_redacted(engine) -> None:
    ctx = context(principal="principal-zed")
    args = capture_args("The ledger is append-only.")
    args["evidence"]["attestation"] = "attested-by-verifier-9"
    cap = engine.execute(CAPTURE, ctx, args)
    rid = admit(engine, ctx, cap["candidate_id"])["outcome"]["record_id"]
    for out in (get(engine, ctx, rid), search(engine, ctx, "ledger append")["records"][0]):
        assert out["redacted_fields"] == ["actor", "evidence.attestation"]
        text = json.dumps(out)
        assert "attested-by-verifier-9" not in text and "principal-zed" not in text
        assert "session-1" not in text and "agent-1" not in text
        assert "attestation" not in out["record"]["evidence"]


def test_pending_candidate_is_neither_searchable_nor_gettable(engine) -> None:
    ctx = context()
    _, cap = capture(engine, ctx, "Pending knowledge about quokka migrations.")
    assert search(engine, ctx, "quokka migrations")["records"] == []
    would_be = record_id_for(cap["record_digest"])
    assert error_of(get, engine, ctx, would_be).code is NOT_FOUND


def test_candidate_id_is_not_a_record_id(engine) -> None:
    ctx = context()
    _, cap = capture(engine, ctx, "Pending knowledge about quokka migrations.")
    assert error_of(get, engine, ctx, cap["candidate_id"]).code in (ErrorCode.INVALID_SCHEMA, NOT_FOUND)
    rid = accept(engine, ctx, "Accepted knowledge about quokka migrations.")
    # nor is a record id a candidate id
    assert error_of(admit, engine, ctx, rid).code is NOT_FOUND


def test_unknown_candidate_admission_is_not_found(engine) -> None:
    assert error_of(admit, engine, context(), "cand_doesnotexist").code is NOT_FOUND


def test_policy_reject_destroys_the_body(make_engine) -> None:
    engine = make_engine(admission_policy={"allowed_locator_schemes": ["doc"]})
    ctx = context()
    _, cap = capture(engine, ctx, "A citation by uri, which this host refuses.")
    before = candidate_row(engine, ctx, cap["candidate_id"])
    assert engine.deps.store.wrapped_key(before.key_id) is not None
    out = admit(engine, ctx, cap["candidate_id"])
    assert out["outcome"]["status"] == "rejected"
    assert "record_id" not in out["outcome"]
    after = candidate_row(engine, ctx, cap["candidate_id"])
    assert after.state == "rejected" and after.sealed is None and after.key_id is None
    assert engine.deps.store.wrapped_key(before.key_id) is None
    with pytest.raises(SealBroken):
        engine.deps.vault.open_json(before.key_id, before.sealed, candidate_aad(ctx.scope, cap["candidate_id"]))
    assert error_of(get, engine, ctx, record_id_for(cap["record_digest"])).code is NOT_FOUND
    # a rejected candidate is terminal
    assert error_of(admit, engine, ctx, cap["candidate_id"]).code is ErrorCode.ALREADY_TERMINAL
    assert error_of(withdraw, engine, ctx, cap["candidate_id"]).code is ErrorCode.ALREADY_TERMINAL


def test_allowed_scheme_is_accepted(make_engine) -> None:
    engine = make_engine(admission_policy={"allowed_locator_schemes": ["uri"]})
    accept(engine, context(), "A citation by uri, which this host allows.")


def test_require_attestation(make_engine) -> None:
    engine = make_engine(admission_policy={"require_attestation": True})
    ctx = context()
    _, cap = capture(engine, ctx, "Knowledge without attestation.")
    assert admit(engine, ctx, cap["candidate_id"])["outcome"]["status"] == "rejected"
    args = capture_args("Knowledge with attestation.")
    args["evidence"]["attestation"] = "verified"
    cap = engine.execute(CAPTURE, ctx, args)
    assert admit(engine, ctx, cap["candidate_id"])["outcome"]["status"] == "accepted"


def test_adjudication_keeps_the_candidate_pending(make_engine) -> None:
    engine = make_engine(admission_policy={"adjudicate_kinds": ["decision"]})
    ctx = context()
    _, cap = capture(engine, ctx, "A decision that needs a human adjudicator.")
    out = admit(engine, ctx, cap["candidate_id"])
    assert out["outcome"]["status"] == "pending_adjudication"
    assert "record_id" not in out["outcome"]
    row = candidate_row(engine, ctx, cap["candidate_id"])
    assert row.state == "pending_adjudication"
    # the body is kept for the adjudicator
    body = engine.deps.vault.open_json(row.key_id, row.sealed, candidate_aad(ctx.scope, cap["candidate_id"]))
    assert body["payload"]["components"][0]["text"] == "A decision that needs a human adjudicator."
    assert search(engine, ctx, "human adjudicator")["records"] == []
    assert error_of(get, engine, ctx, record_id_for(cap["record_digest"])).code is NOT_FOUND
    assert error_of(admit, engine, ctx, cap["candidate_id"]).code is ErrorCode.ILLEGAL_TRANSITION
    assert error_of(withdraw, engine, ctx, cap["candidate_id"]).code is ErrorCode.ILLEGAL_TRANSITION


def test_withdraw_pending(engine) -> None:
    ctx = context()
    _, cap = capture(engine, ctx, "A draft that will be withdrawn.")
    out = withdraw(engine, ctx, cap["candidate_id"])
    WithdrawOutput.model_validate(out)
    assert out["receipt"]["operation"] == "withdraw"
    assert (out["receipt"]["from_state"], out["receipt"]["to_state"]) == ("pending", "withdrawn")
    assert out["replayed"] is False and out["key_destruction"] == "complete"
    assert candidate_row(engine, ctx, cap["candidate_id"]).state == "withdrawn"
    # a new key and a new confirmation: the lifecycle forbids it
    assert error_of(withdraw, engine, ctx, cap["candidate_id"]).code is ErrorCode.ALREADY_TERMINAL
    assert error_of(admit, engine, ctx, cap["candidate_id"]).code is ErrorCode.ALREADY_TERMINAL


def test_withdraw_accepted_candidate_is_already_terminal(engine) -> None:
    ctx = context()
    _, cap = capture(engine, ctx, "Accepted then withdrawn? No.")
    admit(engine, ctx, cap["candidate_id"])
    assert error_of(withdraw, engine, ctx, cap["candidate_id"]).code is ErrorCode.ALREADY_TERMINAL
    assert error_of(admit, engine, ctx, cap["candidate_id"]).code is ErrorCode.ALREADY_TERMINAL


def test_withdraw_unknown_is_not_found(engine) -> None:
    assert error_of(withdraw, engine, context(), "cand_unknown").code is NOT_FOUND


def test_forget(engine) -> None:
    ctx = context()
    rid = accept(engine, ctx, "The quokka service is deprecated.")
    other = accept(engine, ctx, "The quokka gateway stays.")
    out = forget(engine, ctx, rid)
    ForgetOutput.model_validate(out)
    receipt = out["receipt"]
    assert (receipt["operation"], receipt["from_state"], receipt["to_state"]) == (
        "tombstone",
        "accepted_current",
        "tombstoned",
    )
    assert out["projection_invalidation"] == "complete" and out["replayed"] is False
    assert record_row(engine, ctx, rid).state == "tombstoned"
    assert error_of(get, engine, ctx, rid).code is NOT_FOUND
    assert search_ids(engine, ctx, "quokka") == [other]
    assert error_of(forget, engine, ctx, rid).code is ErrorCode.ALREADY_TERMINAL
    get(engine, ctx, other)


def test_forget_unknown_is_not_found(engine) -> None:
    assert error_of(forget, engine, context(), "mem_" + "b" * 52).code is NOT_FOUND


def test_forgotten_content_needs_adjudication(engine) -> None:
    ctx = context()
    text = "The wombat cache is keyed by tenant."
    first_args, first = capture(engine, ctx, text)
    rid = admit(engine, ctx, first["candidate_id"])["outcome"]["record_id"]
    forget(engine, ctx, rid)
    # a new capture of the same content (new key) is committed as usual ...
    again_args = capture_args(text)
    assert again_args["payload"] == first_args["payload"]
    again = engine.execute(CAPTURE, ctx, again_args)
    assert again["status"] == "committed_pending"
    assert again["candidate_id"] != first["candidate_id"]
    # ... but admission holds it for a human instead of accepting it
    out = admit(engine, ctx, again["candidate_id"])
    assert out["outcome"]["status"] == "pending_adjudication"
    assert "record_id" not in out["outcome"]
    assert search(engine, ctx, "wombat cache")["records"] == []
    # the original key with the same content is a replay, not a new adjudication
    replay = engine.execute(CAPTURE, ctx, first_args)
    assert replay == {**first, "status": "duplicate_exact"}


def test_forgotten_content_with_other_evidence_still_needs_adjudication(engine) -> None:
    ctx = context()
    text = "The wombat cache is keyed by workspace."
    rid = accept(engine, ctx, text)
    forget(engine, ctx, rid)
    args = capture_args(text)
    args["evidence"]["evidence_ref"] = "ev:another"
    cap = engine.execute(CAPTURE, ctx, args)
    assert admit(engine, ctx, cap["candidate_id"])["outcome"]["status"] == "pending_adjudication"


def test_admission_of_an_accepted_payload_is_duplicate_exact(engine) -> None:
    ctx = context()
    text = "The numbat queue retries three times."
    _, first = capture(engine, ctx, text)
    rid = admit(engine, ctx, first["candidate_id"])["outcome"]["record_id"]
    _, second = capture(engine, ctx, text)
    assert second["candidate_id"] != first["candidate_id"]
    out = admit(engine, ctx, second["candidate_id"])
    AdmissionOutput.model_validate(out)
    assert out["outcome"]["status"] == "duplicate_exact"
    assert out["outcome"]["record_id"] == rid
    assert candidate_row(engine, ctx, second["candidate_id"]).sealed is None
    assert search_ids(engine, ctx, "numbat queue") == [rid]


def test_different_payload_same_text_other_time_is_a_new_record(engine) -> None:
    ctx = context()
    a = accept(engine, ctx, "The numbat queue retries five times.", t=1_700_000_000_000)
    b = accept(engine, ctx, "The numbat queue retries five times.", t=1_700_000_000_001)
    assert a != b
    assert sorted(search_ids(engine, ctx, "numbat five")) == sorted([a, b])


# -- retention and host policy -------------------------------------------------------------------


def retention_args(text: str, **retention) -> dict:
    args = capture_args(text)
    args["payload"]["retention"] = retention
    return args


def test_retain_needs_host_permission(engine) -> None:
    ctx = context()
    cursor = engine.deps.store.scope_cursor(ctx.scope)
    err = error_of(engine.execute, CAPTURE, ctx, retention_args("Keep derivatives.", derivative_rule="retain"))
    assert err.code is ErrorCode.UNAUTHORIZED
    assert engine.deps.store.scope_cursor(ctx.scope) == cursor
    engine.execute(CAPTURE, ctx, retention_args("Make ineligible.", derivative_rule="make-ineligible"))


def test_retain_with_host_permission(make_engine) -> None:
    engine = make_engine(host_policy={"allow_retain": True})
    ctx = context()
    cap = engine.execute(CAPTURE, ctx, retention_args("Keep derivatives of this.", derivative_rule="retain"))
    rid = admit(engine, ctx, cap["candidate_id"])["outcome"]["record_id"]
    assert get(engine, ctx, rid)["record"]["retention"] == {"derivative_rule": "retain"}


def test_expires_at_must_be_after_now(engine) -> None:
    ctx = context()
    for past in (now_ms() - 1, now_ms() - DAY, 0):
        args = retention_args("Expired on arrival.", derivative_rule="make-ineligible", expires_at=instant(past))
        assert error_of(engine.execute, CAPTURE, ctx, args).code is ErrorCode.INVALID_SCHEMA
    assert engine.deps.store.scope_cursor(ctx.scope) == 0


def test_expires_at_beyond_the_host_cap(make_engine) -> None:
    engine = make_engine(host_policy={"max_retention_ms": DAY})
    ctx = context()
    far = retention_args("Too long.", derivative_rule="make-ineligible", expires_at=instant(now_ms() + 2 * DAY))
    assert error_of(engine.execute, CAPTURE, ctx, far).code is ErrorCode.UNAUTHORIZED
    near = retention_args("Short enough.", derivative_rule="make-ineligible", expires_at=instant(now_ms() + DAY // 2))
    assert engine.execute(CAPTURE, ctx, near)["status"] == "committed_pending"


def test_default_cap_is_a_year(engine) -> None:
    ctx = context()
    far = retention_args("Too long.", derivative_rule="make-ineligible", expires_at=instant(now_ms() + 366 * DAY))
    assert error_of(engine.execute, CAPTURE, ctx, far).code is ErrorCode.UNAUTHORIZED
    ok = retention_args("Fine.", derivative_rule="make-ineligible", expires_at=instant(now_ms() + 364 * DAY))
    engine.execute(CAPTURE, ctx, ok)


def test_reconciliation_needs_host_consent(engine, make_engine) -> None:
    ctx = context()
    args = capture_args("Family bookkeeping.", reconciliation={"family_refs": ["fam:a"]})
    assert error_of(engine.execute, CAPTURE, ctx, args).code is ErrorCode.UNAUTHORIZED
    consenting = make_engine(host_policy={"reconciliation_consent": True}, name="consenting")
    cap = consenting.execute(CAPTURE, ctx, args)
    rid = admit(consenting, ctx, cap["candidate_id"])["outcome"]["record_id"]
    out = get(consenting, ctx, rid)
    assert "payload.reconciliation" in out["redacted_fields"]
    assert "fam:a" not in json.dumps(out)


def test_record_expires_with_its_retention(engine) -> None:
    ctx = context()
    expires = now_ms() + 2500
    args = retention_args(
        "The capybara flag expires soon.", derivative_rule="make-ineligible", expires_at=instant(expires)
    )
    cap = engine.execute(CAPTURE, ctx, args)
    rid = admit(engine, ctx, cap["candidate_id"])["outcome"]["record_id"]
    if now_ms() < expires - 300:
        assert get(engine, ctx, rid)["record"]["record_id"] == rid
    time.sleep(max(0, expires - now_ms()) / 1000 + 0.05)
    assert error_of(get, engine, ctx, rid).code is NOT_FOUND
    assert search(engine, ctx, "capybara flag")["records"] == []


# -- valid time ---------------------------------------------------------------------------------------


def test_records_outside_valid_time_are_not_found(engine) -> None:
    ctx = context()
    now = now_ms()
    future = accept(engine, ctx, "The okapi region opens later.", t=now + DAY)
    args = capture_args("The okapi region closed.", t=now - 2 * DAY)
    args["payload"]["valid_time"]["t_end"] = now - DAY
    cap = engine.execute(CAPTURE, ctx, args)
    ended = admit(engine, ctx, cap["candidate_id"])["outcome"]["record_id"]
    args = capture_args("The okapi region is open now.", t=now - DAY)
    args["payload"]["valid_time"]["t_end"] = now + DAY
    cap = engine.execute(CAPTURE, ctx, args)
    current = admit(engine, ctx, cap["candidate_id"])["outcome"]["record_id"]
    for rid in (future, ended):
        assert error_of(get, engine, ctx, rid).code is NOT_FOUND
    get(engine, ctx, current)
    assert search_ids(engine, ctx, "okapi region") == [current]
    # a not-yet-valid record can still be forgotten (it is accepted_current)
    assert forget(engine, ctx, future)["receipt"]["from_state"] == "accepted_current"


def test_refused_mutations_write_nothing(engine) -> None:
    ctx = context()
    _, cap = capture(engine, ctx, "Something pending.")
    cursor = engine.deps.store.scope_cursor(ctx.scope)
    for call in (
        lambda: admit(engine, ctx, "cand_unknown"),
        lambda: engine.execute(WITHDRAW, ctx, withdraw_args(cap["candidate_id"])),  # no confirmation
        lambda: engine.execute(
            FORGET, ctx, {"record_id": "mem_" + "c" * 52, "idempotency_key": key(), "reason_ref": "r"}
        ),
    ):
        with pytest.raises(ContractError):
            call()
    assert engine.deps.store.scope_cursor(ctx.scope) == cursor
    assert candidate_row(engine, ctx, cap["candidate_id"]).state == "pending"


def test_admission_confirmation_target_is_the_candidate(engine) -> None:
    ctx = context(confirm=frozenset({REQUEST_ADMISSION}))
    _, cap = capture(engine, ctx, "Needs an approved admission.")
    args = {"candidate_id": cap["candidate_id"], "idempotency_key": key("adm")}
    assert error_of(engine.execute, REQUEST_ADMISSION, ctx, args).code is ErrorCode.GATE_FAILED
    out = engine.execute(REQUEST_ADMISSION, confirmed(ctx, REQUEST_ADMISSION, cap["candidate_id"], args), args)
    assert out["outcome"]["status"] == "accepted"


def test_the_output_schemas_name_the_lifecycle_states() -> None:
    """The wire's Literal types and the engine's state enums say the same states."""
    from typing import get_args

    from engram.models import outputs
    from engram.service.engine.lifecycle import FORGETTABLE, AdmissionStatus, CandidateState, RecordState

    def literal(model: type, name: str) -> set[str]:
        return set(get_args(model.model_fields[name].annotation))

    assert literal(outputs.AdmissionOutcome, "status") == set(AdmissionStatus)
    assert literal(outputs.ForgetReceipt, "from_state") == FORGETTABLE
    assert literal(outputs.ForgetReceipt, "to_state") == {RecordState.TOMBSTONED}
    assert literal(outputs.WithdrawReceipt, "from_state") == {CandidateState.PENDING}
    assert literal(outputs.WithdrawReceipt, "to_state") == {CandidateState.WITHDRAWN}
    assert literal(outputs.DisclosedRecord, "state") == {RecordState.ACCEPTED_CURRENT}
