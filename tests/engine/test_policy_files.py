"""Policies as data: validated files, reloaded when they change, POLICY_UNAVAILABLE for
a bad file (with a log line naming the field, never a crash at start-up), and
POLICY_STALE when the policy a decision was taken under is replaced before commit."""

from __future__ import annotations

import json
import logging
import os

import pytest
from engine_support import ErrorCode, admit, capture, capture_args, context, error_of, key, open_engine

from engram.models.tools import CAPTURE
from engram.service.engine import admission, policy


def _write(path, value) -> None:
    """Write a policy file and give it a new mtime (coarse clocks would hide an edit)."""
    path.write_text(value if isinstance(value, str) else json.dumps(value))
    st = os.stat(path)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))


def _candidate_state(engine, ctx, cid) -> str:
    with engine.deps.store.reader() as tx:
        return tx.candidate(ctx.scope, cid).state


@pytest.mark.parametrize(
    ("name", "body", "field"),
    [
        ("admission_policy.json", {"require_attestation": "yes"}, "require_attestation"),
        ("admission_policy.json", {"allowed_locator_schemes": "uri"}, "allowed_locator_schemes"),
        ("admission_policy.json", {"policy_versoin": "2"}, "policy_versoin"),
        ("host_policy.json", {"max_retention_ms": -5}, "max_retention_ms"),
        ("host_policy.json", "{not json", None),
    ],
)
def test_a_bad_file_is_policy_unavailable_not_a_crash(data_dir, caplog, name, body, field) -> None:
    data_dir.mkdir(parents=True)
    _write(data_dir / name, body)
    with caplog.at_level(logging.ERROR, logger="engram.policy"):
        engine = open_engine(data_dir)  # starts
        try:
            ctx = context()
            if name == "host_policy.json":
                err = error_of(engine.execute, CAPTURE, ctx, capture_args("A decision."))
            else:
                _, cap = capture(engine, ctx, "A decision waiting for admission.")
                err = error_of(admit, engine, ctx, cap["candidate_id"])
                assert _candidate_state(engine, ctx, cap["candidate_id"]) == "pending"
            assert err.code is ErrorCode.POLICY_UNAVAILABLE and err.retriable
        finally:
            engine.close()
    lines = [r.getMessage() for r in caplog.records if r.name == "engram.policy"]
    assert lines and name in lines[0]
    assert (f"field {field}" if field else "not valid JSON") in lines[0]


def test_a_fixed_file_is_picked_up_without_restart(make_engine) -> None:
    engine = make_engine(admission_policy={"allowed_locator_schemes": ["doc"]})
    ctx = context()
    _, cap = capture(engine, ctx, "A decision citing a uri locator.")
    assert admit(engine, ctx, cap["candidate_id"])["outcome"]["status"] == "rejected"
    path = engine.deps.data_dir / "admission_policy.json"
    _write(path, {"require_attestation": 3})
    _, cap = capture(engine, ctx, "Another decision citing a uri locator.")
    assert error_of(admit, engine, ctx, cap["candidate_id"]).code is ErrorCode.POLICY_UNAVAILABLE
    _write(path, {"policy_version": "2", "allowed_locator_schemes": ["uri"]})
    out = admit(engine, ctx, cap["candidate_id"])
    assert out["outcome"]["status"] == "accepted"


def test_host_policy_reload(make_engine) -> None:
    engine = make_engine(host_policy={"allow_retain": False})
    ctx = context()
    args = capture_args("Keep this one.", retention={"derivative_rule": "retain"})
    assert error_of(engine.execute, CAPTURE, ctx, args).code is ErrorCode.UNAUTHORIZED
    _write(engine.deps.data_dir / "host_policy.json", {"allow_retain": True})
    assert engine.execute(CAPTURE, ctx, args)["status"] == "committed_pending"


@pytest.mark.parametrize(
    "replacement",
    [
        {"policy_version": "2"},  # a new version
        {"policy_version": "1", "adjudicate_kinds": ["note"]},  # same label, other content
    ],
    ids=["new-version", "edited-in-place"],
)
def test_a_policy_replaced_during_the_decision_is_stale(make_engine, monkeypatch, replacement) -> None:
    engine = make_engine(admission_policy={"policy_version": "1"})
    ctx = context()
    _, cap = capture(engine, ctx, "A decision admitted while the policy changes.")
    path = engine.deps.data_dir / "admission_policy.json"
    decide = policy.AdmissionPolicy.decide

    def decide_then_replace(self, payload, evidence):
        _write(path, replacement)  # the operator edits the policy meanwhile
        return decide(self, payload, evidence)

    monkeypatch.setattr(policy.AdmissionPolicy, "decide", decide_then_replace)
    idem = key("adm")
    err = error_of(admit, engine, ctx, cap["candidate_id"], idem)
    assert err.code is ErrorCode.POLICY_STALE and err.retriable
    assert _candidate_state(engine, ctx, cap["candidate_id"]) == "pending"  # nothing committed
    monkeypatch.setattr(policy.AdmissionPolicy, "decide", decide)
    out = admit(engine, ctx, cap["candidate_id"], idem)  # same key: decided again, under the new one
    assert out["outcome"]["status"] == "accepted"
    decided = [e for e in engine.deps.store.events(ctx.scope) if "decision_receipt" in e.body]
    assert decided[-1].body["decision_receipt"]["policy_version"] == replacement["policy_version"]


def test_a_decision_older_than_the_bound_is_stale(make_engine, monkeypatch) -> None:
    engine = make_engine()
    ctx = context()
    _, cap = capture(engine, ctx, "A slow decision.")
    clock = iter([0, policy.DECISION_TTL_MS + 1])
    real = admission.now_ms
    base = real()
    monkeypatch.setattr(admission, "now_ms", lambda: base + next(clock, policy.DECISION_TTL_MS + 1))
    assert error_of(admit, engine, ctx, cap["candidate_id"]).code is ErrorCode.POLICY_STALE
    monkeypatch.setattr(admission, "now_ms", real)
    assert _candidate_state(engine, ctx, cap["candidate_id"]) == "pending"
