"""Every string a mutation keeps is scanned, the detector fails closed, and what the
service keeps in place of agent-chosen keys and refs is a digest.

Secrets here are fake (random shapes). The assertions read the database file itself,
so a value that reached the journal, a reservation or the confirmation ledger fails.
"""

from __future__ import annotations

import dataclasses
import pickle
import subprocess
import sys
from pathlib import Path

import pytest
from engine_support import (
    CAPTURE,
    FORGET,
    WITHDRAW,
    ErrorCode,
    accept,
    capture,
    capture_args,
    confirmed,
    context,
    error_of,
    files_containing,
    forget_args,
    key,
    withdraw_args,
)

from engram.service.engine import Submission, examine
from engram.service.engine.engine import DB_FILE
from engram.service.engine.ingestion import Refusal
from engram.service.secrets import SecretRefused, scanner

FAKE = "hunter2x" + "Q7"  # what a person writes after "password:"
PROSE_SECRET = f"password: {FAKE}"


def _store_bytes(engine) -> bytes:
    engine.deps.store.purge_freed_pages()
    data_dir = engine.deps.data_dir
    return b"".join(p.read_bytes() for p in data_dir.glob(DB_FILE + "*"))


def _cursor(engine, ctx) -> int:
    return engine.deps.store.scope_cursor(ctx.scope)


@pytest.mark.parametrize("where", ["source_ref", "locator", "evidence_ref", "type_ref", "component_text"])
def test_capture_refuses_a_secret_in_any_field(engine, where: str) -> None:
    ctx = context()
    args = capture_args("An ordinary decision about the release train.")
    payload = args["payload"]
    if where == "source_ref":
        payload["citations"][0]["source_ref"] = PROSE_SECRET
    elif where == "locator":
        payload["citations"][0]["locator"]["value"] = f"https://example.org/?note={PROSE_SECRET}"
    elif where == "evidence_ref":
        args["evidence"]["evidence_ref"] = PROSE_SECRET
    elif where == "component_text":
        payload["components"][0]["text"] = "Ship it. My api key is sk_live_" + "4eC39HqLyjWDarjtT1zdp7dc"
    else:
        payload["primary_event"]["type_ref"] = PROSE_SECRET
    assert error_of(engine.execute, CAPTURE, ctx, args).code is ErrorCode.SECRET_DETECTED
    assert _cursor(engine, ctx) == 0


def test_a_refusal_names_the_rule_that_fired(engine) -> None:
    """The envelope stays the contract's constant one; the exception behind it carries
    the rule id (never the value), for logs and summaries, across processes too."""
    ctx = context()
    err = error_of(engine.execute, CAPTURE, ctx, capture_args(f"Rotate it: {PROSE_SECRET}"))
    assert err.code is ErrorCode.SECRET_DETECTED
    assert isinstance(err, SecretRefused) and err.rule == "prose-credential"
    assert FAKE not in str(err) and FAKE not in err.message
    copy = pickle.loads(pickle.dumps(err))
    assert (copy.code, copy.rule) == (ErrorCode.SECRET_DETECTED, "prose-credential")


def test_a_bulk_refusal_names_the_rule_by_position() -> None:
    leaky = [
        Submission("c0", {"text": "deploy key AKIAIOSFODNN7EXAMPLE"}, {}),
        Submission("c1", {"text": PROSE_SECRET}, {}),
    ]
    batch = examine(("acme", "ws"), leaky)
    assert batch.records == []
    assert [(r.position, r.reason, r.rule) for r in batch.refused] == [
        (0, Refusal.SECRET, "aws-access-key"),
        (1, Refusal.SECRET, "prose-credential"),
    ]


@pytest.mark.sqlite_only("reads the SQLite files' bytes")
def test_withdraw_and_forget_refuse_a_secret_reason(engine) -> None:
    ctx = context()
    _, cap = capture(engine, ctx, "A draft about the kite runner.")
    cid = cap["candidate_id"]
    args = withdraw_args(cid, reason=PROSE_SECRET)
    before = _cursor(engine, ctx)
    assert (
        error_of(engine.execute, WITHDRAW, confirmed(ctx, WITHDRAW, cid, args), args).code is ErrorCode.SECRET_DETECTED
    )
    rid = accept(engine, ctx, "An accepted record about the kite runner.")
    fargs = forget_args(rid, reason=f"the admin password is {FAKE}")
    before = _cursor(engine, ctx)
    assert error_of(engine.execute, FORGET, confirmed(ctx, FORGET, rid, fargs), fargs).code is ErrorCode.SECRET_DETECTED
    assert _cursor(engine, ctx) == before
    assert FAKE.encode() not in _store_bytes(engine)


def test_operator_reason_is_scanned(engine) -> None:
    ctx = context()
    rid = accept(engine, ctx, "A record the operator disputes.")
    err = error_of(engine.operator.transition, ctx.scope, rid, "dispute", PROSE_SECRET)
    assert err.code is ErrorCode.SECRET_DETECTED
    assert engine.operator.transition(ctx.scope, rid, "dispute", "ticket:42") == "accepted_disputed"


@pytest.mark.sqlite_only("reads the SQLite files' bytes")
def test_idempotency_keys_are_kept_as_digests(engine) -> None:
    ctx = context()
    idem = "idem-" + key("visible-marker")
    args = capture_args("A decision kept under a recognisable key.", idempotency_key=idem)
    first = engine.execute(CAPTURE, ctx, args)
    assert engine.execute(CAPTURE, ctx, args)["candidate_id"] == first["candidate_id"]  # replay works
    assert idem.encode() not in _store_bytes(engine)
    assert files_containing(engine.deps.data_dir, idem.encode()) == []


@pytest.mark.sqlite_only("rewrites the SQLite file as an older release wrote it")
def test_legacy_raw_keys_are_migrated(data_dir: Path) -> None:
    import sqlite3

    from engine_support import open_engine

    eng = open_engine(data_dir)
    ctx = context()
    idem = "legacy-" + key("raw")
    args = capture_args("A capture from before keys were digests.", idempotency_key=idem)
    first = eng.execute(CAPTURE, ctx, args)
    eng.close()
    # Put the database back the way an older version wrote it: the key as sent.
    conn = sqlite3.connect(data_dir / DB_FILE)
    conn.execute("UPDATE idempotency SET key=?", (idem,))
    conn.execute("DELETE FROM schema_migrations WHERE version >= 2")
    conn.commit()
    conn.close()
    eng = open_engine(data_dir)
    try:
        again = eng.execute(CAPTURE, ctx, args)
        assert again["candidate_id"] == first["candidate_id"] and again["status"] == "duplicate_exact"
        assert idem.encode() not in _store_bytes(eng)
    finally:
        eng.close()


def test_confirmation_refs_are_per_tenant(engine) -> None:
    """Tenant B reusing a ref string tenant A used is B's own first use."""
    a, b = context(tenant="acme"), context(tenant="globex")
    for ctx in (a, b):
        engine.operator.set_tenant_enabled(ctx.tenant, True)
        rid = accept(engine, ctx, f"A record of {ctx.tenant}.")
        args = forget_args(rid)
        out = engine.execute(FORGET, confirmed(ctx, FORGET, rid, args, ref="shared-ref-1"), args)
        assert out["receipt"]["to_state"] == "tombstoned"
    # ... and within one tenant the ref is still used once.
    rid = accept(engine, a, "Another record of acme.")
    args = forget_args(rid)
    assert (
        error_of(engine.execute, FORGET, confirmed(a, FORGET, rid, args, ref="shared-ref-1"), args).code
        is ErrorCode.GATE_FAILED
    )


def test_a_raising_plugin_fails_closed(monkeypatch: pytest.MonkeyPatch) -> None:
    plugin = next(p.plugin for p in scanner.detector().plugins if p.name == "ds-basic-auth-credentials")

    def boom(_text: str):
        raise RuntimeError("plugin bug")

    monkeypatch.setattr(plugin, "analyze_string", boom)
    assert scanner.find_secret("see https://example.org/docs for the guide") == scanner.DETECTOR_FAILED


def test_missing_detect_secrets_fails_closed(tmp_path: Path) -> None:
    """Without detect-secrets the detector refuses everything rather than pass it."""
    code = (
        "import sys; sys.modules['detect_secrets'] = None\n"
        "from engram.service.secrets.scanner import find_secret, DETECTOR_UNAVAILABLE\n"
        "assert find_secret('an ordinary sentence about kites') == DETECTOR_UNAVAILABLE\n"
        "print('closed')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "closed"


def test_engine_refuses_while_detector_is_down(engine, monkeypatch: pytest.MonkeyPatch) -> None:
    down = dataclasses.replace(scanner.detector(), fault=scanner.DETECTOR_UNAVAILABLE)
    monkeypatch.setattr(scanner, "detector", lambda: down)
    ctx = context()
    err = error_of(engine.execute, CAPTURE, ctx, capture_args("A perfectly ordinary decision."))
    assert err.code is ErrorCode.SECRET_DETECTED
    assert _cursor(engine, ctx) == 0
