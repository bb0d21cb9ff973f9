"""Contract digests: pinned vectors, JCS independence, NFC, refusals, record ids, and
every receipt digest the engine returns recomputed from what is visible."""

from __future__ import annotations

import base64
import hashlib
import math
from enum import StrEnum

import pytest
import rfc8785
from engine_support import (
    CAPTURE,
    FORGET,
    GET,
    PURPOSE,
    REQUEST_ADMISSION,
    SEARCH,
    WITHDRAW,
    accept,
    admit,
    capture,
    context,
    forget,
    get,
    search,
    withdraw,
)
from hypothesis import given, settings
from hypothesis import strategies as st

from engram.models.digests import (
    MAX_SAFE_INTEGER,
    CanonicalizationRefused,
    DigestKind,
    _normalised,
    canonical_bytes,
    digest,
    receipt_digest,
    record_id_for,
    seal_receipt,
)
from engram.models.outputs import AdmissionOutput, CaptureOutput, ForgetOutput, GetOutput, SearchOutput, WithdrawOutput
from engram.service.engine.records import REDACTION_POLICY


def independent(kind: str, jcs: bytes) -> str:
    """The digest computed by hand: sha256 over the domain prefix and literal JCS bytes."""
    return "sha256:" + hashlib.sha256(f"engram/{kind}/v1\0".encode() + jcs).hexdigest()


# -- pinned vectors ---------------------------------------------------------------------------

VECTORS = [
    (
        DigestKind.PAYLOAD,
        {"a": 1, "b": [True, None, "x"]},
        "sha256:ef38ca9c287a064518899758afa2123c1284aaec5da30a3ea7258e87ca2a5ecb",
    ),
    (DigestKind.PAYLOAD, {}, "sha256:0ec96bf651a56e0a38239389968219f6be6cd3ddf137dfcbd8723a74bb2be6ee"),
    (
        DigestKind.PAYLOAD,
        {"text": "caf\u00e9", "n": -5, "f": 1.5},
        "sha256:478eb9f45619d7ab7469fc45fad8df6375fc2200447bbe0082785a6cb9f1ebd6",
    ),
    (DigestKind.PAYLOAD, 1e21, "sha256:976e8dcae46493a4b6482c0fc45c8a00016f97ed965b80841d450e697109deeb"),
    (DigestKind.PAYLOAD, MAX_SAFE_INTEGER, "sha256:b06cc563f84ed2da8a1fc1872e749afd2ecabb2dd81f09ccf5e486e616389a7e"),
    (
        DigestKind.RECORD,
        {
            "tenant": "acme",
            "workspace": "main",
            "candidate_id": "cand_x",
            "payload_digest": "sha256:" + "0" * 64,
            "evidence_digest": "sha256:" + "1" * 64,
        },
        "sha256:0404ac87fb14f3984a543b782f79d761f488c12f90f56f8af4ba92806d5941c8",
    ),
    (
        DigestKind.EVENT,
        {"cursor": "1", "kind": "candidate_captured"},
        "sha256:219ccc0bf6035b1ebb47b17bb0fac08641d1cf08bae97fdfa6edfd95e5842be7",
    ),
    (
        DigestKind.RANK_RECEIPT,
        {"profile": "lexical", "candidate_count": 0},
        "sha256:dde711929ce5403905aacd43cd1baeae7f1c181a8062bcc158ab48083f8855dc",
    ),
    (
        DigestKind.OPERATION,
        {
            "tool": "engram_memory_forget",
            "arguments": {"record_id": "mem_aa", "idempotency_key": "k" * 16, "reason_ref": "r"},
        },
        "sha256:f9a34bb555c29009a820797944a72bf6e92fd58f071705f6cf4a4ef013c628ec",
    ),
]


@pytest.mark.parametrize(("kind", "value", "expected"), VECTORS)
def test_pinned_vectors(kind: DigestKind, value: object, expected: str) -> None:
    assert digest(kind, value) == expected


def test_vectors_match_a_hand_computation() -> None:
    assert digest(DigestKind.PAYLOAD, {"b": [True, None, "x"], "a": 1}) == independent(
        "payload", b'{"a":1,"b":[true,null,"x"]}'
    )
    assert digest(DigestKind.EVENT, {"kind": "candidate_captured", "cursor": "1"}) == independent(
        "event", b'{"cursor":"1","kind":"candidate_captured"}'
    )
    assert digest(DigestKind.PAYLOAD, 1e21) == independent("payload", b"1e+21")
    assert digest(DigestKind.PAYLOAD, {"n": -5, "f": 1.5, "text": "caf\u00e9"}) == independent(
        "payload", '{"f":1.5,"n":-5,"text":"caf\u00e9"}'.encode()
    )


def test_jcs_bytes() -> None:
    assert canonical_bytes({"b": 1, "a": [1.5, 1e21, 0.1, "\u00e9"], "\u20ac": None}) == (
        b'{"a":[1.5,1e+21,0.1,"\xc3\xa9"],"b":1,"\xe2\x82\xac":null}'
    )
    assert canonical_bytes('\u2028"\\\n') == b'"\xe2\x80\xa8\\"\\\\\\n"'
    assert canonical_bytes(4.0) == b"4"


def test_kinds_are_domain_separated() -> None:
    value = {"a": 1}
    seen = {digest(kind, value) for kind in DigestKind}
    assert len(seen) == len(DigestKind)


def test_digest_form() -> None:
    out = digest(DigestKind.PAYLOAD, {"x": "y"})
    assert out.startswith("sha256:") and len(out) == 71
    assert out[7:] == out[7:].lower() and int(out[7:], 16) >= 0


# -- JCS properties ---------------------------------------------------------------------------

json_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-MAX_SAFE_INTEGER, MAX_SAFE_INTEGER),
    st.floats(allow_nan=False, allow_infinity=False).filter(lambda f: not (f == 0 and math.copysign(1, f) < 0)),
    st.text(alphabet=st.characters(exclude_categories=("Cs",)), max_size=12),
)
json_docs = st.recursive(
    json_scalars,
    lambda c: st.one_of(
        st.lists(c, max_size=4), st.dictionaries(st.text(alphabet="abcdefgh", max_size=4), c, max_size=4)
    ),
    max_leaves=20,
)


@settings(max_examples=100, deadline=None)
@given(
    doc=st.dictionaries(st.text(alphabet="abcdefghij", min_size=1, max_size=5), json_docs, min_size=1, max_size=6),
    seed=st.randoms(use_true_random=False),
)
def test_key_order_independence(doc: dict, seed) -> None:
    keys = list(doc)
    seed.shuffle(keys)
    shuffled = {k: doc[k] for k in keys}
    assert digest(DigestKind.PAYLOAD, shuffled) == digest(DigestKind.PAYLOAD, doc)
    assert canonical_bytes(shuffled) == canonical_bytes(doc)


class _Channel(StrEnum):
    """A str enum member, as receipts carry (channel names): written as its value."""

    LEXICAL = "lexical"
    ODD = "caf\u00e9\n"


any_text = st.text(alphabet=st.characters(exclude_categories=("Cs",)), max_size=12)
wide_docs = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(-MAX_SAFE_INTEGER, MAX_SAFE_INTEGER),
        any_text,
        st.floats(allow_nan=False, allow_infinity=False).filter(lambda f: not (f == 0 and math.copysign(1, f) < 0)),
        st.sampled_from(
            [
                1.0,
                0.0,
                0.5,
                1e-4,
                9.999e-5,
                1e16,
                9999999999999998.0,
                2.0**53,
                2.0**53 + 2,
                0.1 + 0.2,
                -5e-06,  # a similarity rounded to six places: written by JCS's own number bytes
                1e-7,
                1e21,
                5e-324,
                '"\\\n\x7f\u2028',
                "cafe\u0301",
                "\U0001f600",
                *_Channel,
            ]
        ),
    ),
    lambda c: st.one_of(
        st.lists(c, max_size=5),
        st.dictionaries(
            st.one_of(any_text, st.sampled_from(["\ue000", "\U0001f600", "a\u0301", *_Channel])), c, max_size=5
        ),
    ),
    max_leaves=30,
)


@settings(max_examples=500, deadline=None)
@given(doc=wide_docs)
def test_fast_path_writes_exactly_what_the_full_canonicaliser_writes(doc: object) -> None:
    # Floats, unnormalised text, non-BMP keys, escapes and nesting are where a
    # json.dumps shortcut could drift from RFC 8785; keys that collide once normalised
    # must be refused either way.
    try:
        expected = rfc8785.dumps(_normalised(doc))
    except CanonicalizationRefused:
        with pytest.raises(CanonicalizationRefused):
            canonical_bytes(doc)
    else:
        assert canonical_bytes(doc) == expected


def test_nfc_normalisation_of_values_and_keys() -> None:
    composed, decomposed = "caf\u00e9", "cafe\u0301"
    assert digest(DigestKind.PAYLOAD, composed) == digest(DigestKind.PAYLOAD, decomposed)
    assert digest(DigestKind.PAYLOAD, {composed: 1}) == digest(DigestKind.PAYLOAD, {decomposed: 1})
    assert digest(DigestKind.PAYLOAD, ["\u212b"]) == digest(DigestKind.PAYLOAD, ["\u00c5"])  # angstrom
    assert digest(DigestKind.PAYLOAD, composed) != digest(DigestKind.PAYLOAD, "cafe")


@pytest.mark.parametrize(
    "bad",
    [
        math.nan,
        math.inf,
        -math.inf,
        -0.0,
        MAX_SAFE_INTEGER + 1,
        -(MAX_SAFE_INTEGER + 1),
        2**64,
        "\ud800",
        "a\udfffb",
        {"\ud800": 1},
        {"k": [1, {"x": math.nan}]},
        {1: "x"},
        {"x": {1, 2}},
        b"bytes",
        {"e\u0301": 1, "\u00e9": 2},
        object(),
    ],
)
def test_refusals(bad: object) -> None:
    with pytest.raises(CanonicalizationRefused):
        digest(DigestKind.PAYLOAD, bad)


def test_boundary_values_accepted() -> None:
    for ok in (MAX_SAFE_INTEGER, -MAX_SAFE_INTEGER, 0.0, 0, "\U0001f600", 5e-324):
        digest(DigestKind.PAYLOAD, ok)


# -- record ids and receipts ---------------------------------------------------------------------


def test_record_id_is_mem_plus_lowercase_unpadded_base32() -> None:
    d = digest(DigestKind.RECORD, {"x": 1})
    expected = "mem_" + base64.b32encode(bytes.fromhex(d[7:])).decode().rstrip("=").lower()
    assert record_id_for(d) == expected
    assert "=" not in expected and expected == expected.lower() and len(expected) == 4 + 52
    assert record_id_for("sha256:" + "00" * 32) == "mem_" + "a" * 52


def test_receipt_digest_excludes_itself() -> None:
    body = {"policy_id": "p", "decision": "accept"}
    sealed = seal_receipt(DigestKind.DECISION_RECEIPT, body)
    assert sealed["receipt_digest"] == digest(DigestKind.DECISION_RECEIPT, body)
    assert receipt_digest(DigestKind.DECISION_RECEIPT, sealed) == sealed["receipt_digest"]
    assert (
        receipt_digest(DigestKind.DECISION_RECEIPT, {**sealed, "receipt_digest": "sha256:" + "0" * 64})
        == sealed["receipt_digest"]
    )
    tampered = {**sealed, "decision": "reject"}
    assert receipt_digest(DigestKind.DECISION_RECEIPT, tampered) != sealed["receipt_digest"]


# -- receipts returned by the engine, recomputed ---------------------------------------------------


def events_by_cursor(engine, scope) -> dict[int, object]:
    return {e.cursor: e for e in engine.deps.store.events(scope)}


def auth_receipt_digest(ctx, tool: str, issued_at: str) -> str:
    return digest(
        DigestKind.AUTHORIZATION_RECEIPT,
        {
            "tool": tool,
            "tenant": ctx.tenant,
            "workspace": ctx.workspace,
            "principal": ctx.principal,
            "agent_id": ctx.agent_id,
            "session": ctx.session,
            "purpose": ctx.purpose,
            "granted": True,
            "issued_at": issued_at,
        },
    )


def tx_receipt_digest(tool: str, events: list, cursor: int) -> str:
    return digest(
        DigestKind.TRANSACTION_RECEIPT,
        {
            "tool": tool,
            "event_digests": [e.event_digest for e in events],
            "cursor": str(cursor),
            "committed_at": events[-1].recorded_at,
        },
    )


def test_journal_event_digests_chain(engine) -> None:
    ctx = context()
    rid = accept(engine, ctx, "The ledger uses strict serialisable transactions.")
    forget(engine, ctx, rid)
    previous = None
    events = list(engine.deps.store.events(ctx.scope))
    assert [e.cursor for e in events] == list(range(1, len(events) + 1))
    for e in events:
        expected = digest(
            DigestKind.EVENT,
            {
                "tenant": ctx.tenant,
                "workspace": ctx.workspace,
                "cursor": str(e.cursor),
                "event_id": e.event_id,
                "kind": e.kind,
                "subject": e.subject,
                "body": e.body,
                "prev_digest": previous,
                "recorded_at": e.recorded_at,
            },
        )
        assert e.event_digest == expected
        previous = e.event_digest
    assert engine.operator.verify_journal() == {"acme/main": True}


def test_capture_digests(engine) -> None:
    ctx = context()
    args, out = capture(engine, ctx, "The ledger uses strict serialisable transactions.")
    CaptureOutput.model_validate(out)
    event = events_by_cursor(engine, ctx.scope)[int(out["cursor"])]
    assert event.subject == out["candidate_id"] and event.kind == "candidate_captured"
    p_digest = digest(DigestKind.PAYLOAD, args["payload"])
    e_digest = digest(DigestKind.EVIDENCE, args["evidence"])
    assert event.body["payload_digest"] == p_digest
    assert event.body["evidence_digest"] == e_digest
    assert out["record_digest"] == digest(
        DigestKind.RECORD,
        {
            "tenant": "acme",
            "workspace": "main",
            "candidate_id": out["candidate_id"],
            "payload_digest": p_digest,
            "evidence_digest": e_digest,
        },
    )
    assert out["transaction_receipt_digest"] == tx_receipt_digest(CAPTURE, [event], event.cursor)
    assert event.body["authorization_receipt_digest"] == auth_receipt_digest(ctx, CAPTURE, event.recorded_at)


def test_admission_digests(engine) -> None:
    ctx = context()
    _, cap = capture(engine, ctx, "The ledger uses strict serialisable transactions.")
    out = admit(engine, ctx, cap["candidate_id"])
    AdmissionOutput.model_validate(out)
    outcome = out["outcome"]
    events = events_by_cursor(engine, ctx.scope)
    decided, accepted = events[int(outcome["cursor"]) - 1], events[int(outcome["cursor"])]
    assert (decided.kind, accepted.kind) == ("candidate_accepted", "record_accepted")
    decision = decided.body["decision_receipt"]
    assert decision["decision"] == "accept" and decision["record_digest"] == cap["record_digest"]
    assert receipt_digest(DigestKind.DECISION_RECEIPT, decision) == decision["receipt_digest"]
    assert outcome["decision_receipt_digest"] == decision["receipt_digest"]
    assert outcome["transaction_receipt_digest"] == tx_receipt_digest(
        REQUEST_ADMISSION, [decided, accepted], accepted.cursor
    )
    assert outcome["record_id"] == record_id_for(cap["record_digest"])
    assert accepted.subject == outcome["record_id"]


def test_get_digests(engine) -> None:
    ctx = context()
    args, cap = capture(engine, ctx, "The ledger uses strict serialisable transactions.")
    rid = admit(engine, ctx, cap["candidate_id"])["outcome"]["record_id"]
    out = get(engine, ctx, rid)
    GetOutput.model_validate(out)
    record = out["record"]
    assert record["record_digest"] == cap["record_digest"]
    assert record["payload_digest"] == digest(DigestKind.PAYLOAD, args["payload"])
    read = out["read_receipt"]
    assert receipt_digest(DigestKind.READ_RECEIPT, read) == read["receipt_digest"]
    assert read["record_id"] == rid and read["record_digest"] == cap["record_digest"]
    assert read["system_as_of"] == str(engine.deps.store.scope_cursor(ctx.scope))
    assert read["authorization_receipt_digest"] == auth_receipt_digest(ctx, GET, read["valid_as_of"])
    assert out["packet_digest"] == digest(DigestKind.PACKET, {k: v for k, v in out.items() if k != "packet_digest"})
    assert out["redaction_receipt_digest"] == digest(
        DigestKind.REDACTION_RECEIPT,
        {
            "record_id": rid,
            "record_digest": cap["record_digest"],
            "policy": REDACTION_POLICY,
            "redacted_fields": out["redacted_fields"],
        },
    )
    assert out["redacted_fields"] == ["actor"]


def test_search_digests(engine) -> None:
    ctx = context()
    rid = accept(engine, ctx, "The ledger uses strict serialisable transactions.")
    out = search(engine, ctx, "ledger serialisable", limit=5)
    SearchOutput.model_validate(out)
    assert [p["record"]["record_id"] for p in out["records"]] == [rid]
    receipt = out["rank_receipt"]
    assert receipt_digest(DigestKind.RANK_RECEIPT, receipt) == receipt["receipt_digest"]
    assert out["response_digest"] == digest(
        DigestKind.RESPONSE, {k: v for k, v in out.items() if k != "response_digest"}
    )
    assert receipt["request_digest"] == digest(
        DigestKind.REQUEST,
        {
            "query": "ledger serialisable",
            "purpose_ref": PURPOSE,
            "limit": 5,
            "max_packet_bytes": 65536,
            "capability_policy": {"minimum_channels": "lexical", "network": "forbid"},
        },
    )
    assert receipt["ordered_ids_digest"] == digest(DigestKind.IDS, [rid])
    assert receipt["authorization_receipt_digest"] == auth_receipt_digest(ctx, SEARCH, receipt["issued_at"])
    packet = out["records"][0]
    assert packet["redaction_receipt_digest"] == get(engine, ctx, rid)["redaction_receipt_digest"]


def test_withdraw_and_forget_digests(engine) -> None:
    ctx = context()
    _, cap = capture(engine, ctx, "A pending note about the ledger schema.")
    out = withdraw(engine, ctx, cap["candidate_id"])
    WithdrawOutput.model_validate(out)
    receipt = out["receipt"]
    event = events_by_cursor(engine, ctx.scope)[int(receipt["cursor"])]
    assert (event.event_id, event.event_digest, event.kind) == (
        receipt["event_id"],
        receipt["event_digest"],
        "candidate_withdrawn",
    )
    assert receipt["transaction_receipt_digest"] == tx_receipt_digest(WITHDRAW, [event], event.cursor)
    assert receipt["authorization_receipt_digest"] == auth_receipt_digest(ctx, WITHDRAW, event.recorded_at)

    rid = accept(engine, ctx, "The ledger uses strict serialisable transactions.")
    out = forget(engine, ctx, rid)
    ForgetOutput.model_validate(out)
    receipt = out["receipt"]
    event = events_by_cursor(engine, ctx.scope)[int(receipt["cursor"])]
    assert (event.event_id, event.event_digest, event.kind, event.subject) == (
        receipt["event_id"],
        receipt["event_digest"],
        "record_tombstoned",
        rid,
    )
    assert receipt["transaction_receipt_digest"] == tx_receipt_digest(FORGET, [event], event.cursor)
    assert receipt["authorization_receipt_digest"] == auth_receipt_digest(ctx, FORGET, event.recorded_at)


def test_str_enum_members_digest_as_their_values() -> None:
    value = {"channels": [_Channel.LEXICAL], "channel": _Channel.ODD, _Channel.LEXICAL: 1}
    plain = {"channels": ["lexical"], "channel": "caf\u00e9\n", "lexical": 1}
    assert canonical_bytes(value) == canonical_bytes(plain) == rfc8785.dumps(plain)
