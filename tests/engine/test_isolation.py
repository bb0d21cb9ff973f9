"""Tenant and workspace isolation: another scope's ids are NOT_FOUND exactly like unknown
ids, and nothing of one scope is ever visible from another."""

from __future__ import annotations

import itertools

import pytest
from engine_support import (
    FORGET,
    ContractError,
    ErrorCode,
    accept,
    admit,
    capture,
    confirmed,
    context,
    error_of,
    forget,
    forget_args,
    get,
    open_engine,
    search,
    search_ids,
    withdraw,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

A = context(tenant="acme", workspace="main")
B = context(tenant="acme", workspace="other")
C = context(tenant="umbrella", workspace="main")
UNKNOWN_RID = "mem_" + "q" * 52
UNKNOWN_CID = "cand_" + "q" * 32


def failure(fn, *args) -> tuple:
    err = error_of(fn, *args)
    return err.code, err.message, err.retriable, str(err), err.args


@pytest.mark.parametrize("other", [B, C], ids=["other-workspace", "other-tenant"])
def test_other_scope_record_is_not_found_like_unknown(engine, other) -> None:
    rid = accept(engine, A, "The ibis service owns invoices.")
    unknown = failure(get, engine, other, UNKNOWN_RID)
    assert unknown[0] is ErrorCode.NOT_FOUND
    assert failure(get, engine, other, rid) == unknown
    assert failure(forget, engine, other, rid) == failure(forget, engine, other, UNKNOWN_RID)
    assert failure(forget, engine, other, rid)[0] is ErrorCode.NOT_FOUND
    # and the record is intact in its own scope
    assert get(engine, A, rid)["record"]["record_id"] == rid


@pytest.mark.parametrize("other", [B, C], ids=["other-workspace", "other-tenant"])
def test_other_scope_candidate_is_not_found_like_unknown(engine, other) -> None:
    _, cap = capture(engine, A, "The ibis service owns invoices.")
    cid = cap["candidate_id"]
    for fn in (admit, withdraw):
        theirs, unknown = failure(fn, engine, other, cid), failure(fn, engine, other, UNKNOWN_CID)
        assert theirs == unknown and theirs[0] is ErrorCode.NOT_FOUND
    # untouched: still pending and admissible in its own scope
    assert admit(engine, A, cid)["outcome"]["status"] == "accepted"


def test_confirmed_cross_scope_forget_is_still_not_found(engine) -> None:
    rid = accept(engine, A, "The ibis service owns invoices.")
    args = forget_args(rid)
    ctx = confirmed(B, FORGET, rid, args)
    assert error_of(engine.execute, FORGET, ctx, args).code is ErrorCode.NOT_FOUND
    get(engine, A, rid)


@pytest.mark.parametrize("other", [B, C], ids=["other-workspace", "other-tenant"])
def test_search_never_crosses_scopes_even_with_identical_text(engine, other) -> None:
    text = "The heron pipeline compacts ledgers nightly."
    mine = accept(engine, A, text)
    assert search_ids(engine, other, "heron pipeline") == []
    theirs = accept(engine, other, text)
    assert theirs != mine  # bound to the scope through its candidate
    assert search_ids(engine, A, "heron pipeline") == [mine]
    assert search_ids(engine, other, "heron pipeline") == [theirs]
    forget(engine, A, mine)
    assert search_ids(engine, other, "heron pipeline") == [theirs]
    get(engine, other, theirs)


def test_same_content_in_two_scopes_does_not_interact(engine) -> None:
    text = "The egret queue is sharded by tenant."
    mine = accept(engine, A, text)
    forget(engine, A, mine)
    # a tombstone in A holds nothing back in B
    _, cap = capture(engine, B, text)
    assert admit(engine, B, cap["candidate_id"])["outcome"]["status"] == "accepted"
    # an accepted record in B is no duplicate for A
    _, cap = capture(engine, C, text)
    accepted_b = search_ids(engine, B, "egret queue")
    out = admit(engine, C, cap["candidate_id"])["outcome"]
    assert out["status"] == "accepted" and out["record_id"] not in accepted_b


def test_page_cursor_does_not_cross_scopes(engine) -> None:
    for i in range(3):
        accept(engine, A, f"The stork batch number {i} is archived.")
    first = search(engine, A, "stork batch", limit=1)
    assert "next_page_cursor" in first
    err = error_of(search, engine, B, "stork batch", limit=1, page_cursor=first["next_page_cursor"])
    assert err.code is ErrorCode.STALE_PAGE


# -- property: random operations over several scopes never leak -----------------------------------

SCOPES = [("t1", "w1"), ("t1", "w2"), ("t2", "w1"), ("t2", "w2")]
WORDS = ["alpha", "bravo", "delta", "gamma"]
_serial = itertools.count()
EVER: dict[tuple, set] = {s: set() for s in SCOPES}  # every record each scope ever accepted
GONE: set = set()  # every record forgotten so far


@pytest.fixture(scope="module")
def shared_engine(fast_tmp):
    eng = open_engine(fast_tmp.mktemp("isolation"))
    yield eng
    eng.close()


operations = st.lists(
    st.tuples(
        st.sampled_from(["capture", "accept", "accept", "forget", "withdraw", "probe"]),
        st.integers(0, len(SCOPES) - 1),
        st.sampled_from(WORDS),
        st.integers(0, 1000),
    ),
    min_size=3,
    max_size=8,
)


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)
@given(ops=operations)
def test_random_operations_never_cross_scopes(shared_engine, ops) -> None:
    eng = shared_engine
    run = next(_serial)
    owned: dict[tuple, dict[str, set]] = {s: {"records": set(), "live": set(), "candidates": set()} for s in SCOPES}
    ctxs = {s: context(tenant=s[0], workspace=s[1]) for s in SCOPES}
    marker = f"isorun{run}"
    for op, si, word, pick in ops:
        scope = SCOPES[si]
        ctx = ctxs[scope]
        mine = owned[scope]
        if op in ("capture", "accept"):
            _, cap = capture(eng, ctx, f"{marker} {word} shared text {pick}")
            mine["candidates"].add(cap["candidate_id"])
            if op == "accept":
                out = admit(eng, ctx, cap["candidate_id"])["outcome"]
                if out["status"] in ("accepted", "duplicate_exact"):
                    mine["records"].add(out["record_id"])
                    mine["live"].add(out["record_id"])
        elif op == "forget" and mine["live"]:
            rid = sorted(mine["live"])[pick % len(mine["live"])]
            forget(eng, ctx, rid)
            mine["live"].discard(rid)
        elif op == "withdraw" and mine["candidates"]:
            cid = sorted(mine["candidates"])[pick % len(mine["candidates"])]
            try:
                withdraw(eng, ctx, cid)
            except ContractError as exc:  # already decided, or held for adjudication
                assert exc.code in (ErrorCode.ALREADY_TERMINAL, ErrorCode.ILLEGAL_TRANSITION)
        EVER[scope].update(mine["records"])
        GONE.update(mine["records"] - mine["live"])
        # after every step, each scope sees its own live records of this run, and nothing
        # but live records it owns (the semantic channel may add older ones of its own)
        for s in SCOPES:
            seen = set(search_ids(eng, ctxs[s], marker, limit=50))
            assert owned[s]["live"] <= seen, (s, seen, owned[s]["live"])
            assert seen <= EVER[s] and not seen & GONE, (s, seen)
    for s in SCOPES:
        others = [o for o in SCOPES if o != s]
        for o in others:
            for rid in owned[o]["records"]:
                assert error_of(get, eng, ctxs[s], rid).code is ErrorCode.NOT_FOUND
            for cid in list(owned[o]["candidates"])[:2]:
                assert error_of(admit, eng, ctxs[s], cid).code is ErrorCode.NOT_FOUND
        for rid in owned[s]["live"]:
            get(eng, ctxs[s], rid)


# -- property: no query text reaches another scope -------------------------------------------------


@pytest.fixture(scope="module")
def two_scopes(fast_tmp):
    eng = open_engine(fast_tmp.mktemp("query-fuzz"))
    mine = {accept(eng, A, f"The puffin {w} ledger record {i} of scope A.") for i, w in enumerate(WORDS)}
    theirs = {accept(eng, B, f"The puffin {w} ledger record {i} of scope B.") for i, w in enumerate(WORDS)}
    yield eng, mine, theirs
    eng.close()


INJECTIONS = [
    "*",
    "*:*",
    "scope:*",
    "record_id:*",
    "puffin OR scope:*",
    'primary:"puffin"',
    "puffin AND NOT x",
    "(puffin",
    "puffin)",
    "puffin~2",
    "puf*",
    "[a TO z]",
    "\\",
    '"',
    "+puffin -ledger",
    "puffin^100",
    "!!!",
    " ",
    "\u3000",
    "\u65e5\u672c\u8a9e",
    "\U0001f600 puffin",
    "puffin " * 1000,
]


@pytest.mark.parametrize("query", INJECTIONS)
def test_query_syntax_never_crosses_scopes(two_scopes, query: str) -> None:
    eng, mine, theirs = two_scopes
    for ctx, own, other in ((A, mine, theirs), (B, theirs, mine)):
        seen = set(search_ids(eng, ctx, query, limit=50))
        assert seen <= own and not seen & other


@settings(max_examples=60, deadline=None)
@given(query=st.text(min_size=1, max_size=60))
def test_random_queries_never_cross_scopes(two_scopes, query: str) -> None:
    eng, mine, theirs = two_scopes
    try:
        seen = set(search_ids(eng, A, query, limit=50))
    except ContractError as exc:
        assert exc.code is ErrorCode.INVALID_SCHEMA  # not NFC, or a lone surrogate
        return
    assert seen <= mine and not seen & theirs
