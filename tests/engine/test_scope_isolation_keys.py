"""Scope keys cannot collide, and one tenant's paging cannot evict another's snapshots."""

from __future__ import annotations

import pytest
from engine_support import ErrorCode, accept, context, error_of, search, search_ids
from hypothesis import given, settings
from hypothesis import strategies as st

from engram.service.engine import paging
from engram.service.engine.records import scope_key

_ID = st.text(alphabet=st.sampled_from(["a", "b", "\0", "[", '"', ",", "\\", "]", "é"]), min_size=1, max_size=6)


@settings(max_examples=500, deadline=None)
@given(_ID, _ID, _ID, _ID)
def test_distinct_scopes_get_distinct_keys(t1: str, w1: str, t2: str, w2: str) -> None:
    if (t1, w1) != (t2, w2):
        assert scope_key((t1, w1)) != scope_key((t2, w2))


@pytest.mark.sqlite_only("PostgreSQL text cannot hold NUL, so such ids never reach its store")
def test_the_old_ambiguity_is_gone(engine) -> None:
    assert scope_key(("a\0b", "c")) != scope_key(("a", "b\0c"))
    assert scope_key(("acme", "main")) == scope_key(("acme", "main"))  # stable for plain ids
    a, b = context(tenant="a\0b", workspace="c"), context(tenant="a", workspace="b\0c")
    for ctx in (a, b):
        engine.operator.set_tenant_enabled(ctx.tenant, True)
    ra = accept(engine, a, "Walrus tusks are ivory teeth.")
    rb = accept(engine, b, "Walrus whiskers sense clams.")
    assert search_ids(engine, a, "walrus") == [ra]
    assert search_ids(engine, b, "walrus") == [rb]


def test_one_tenant_cannot_evict_anothers_snapshots(engine, backend, monkeypatch) -> None:
    monkeypatch.setattr(paging, "MAX_SNAPSHOTS_PER_TENANT", 4)
    quiet, noisy = context(tenant="quiet"), context(tenant="noisy")
    for ctx in (quiet, noisy):
        engine.operator.set_tenant_enabled(ctx.tenant, True)
        for i in range(3):
            accept(engine, ctx, f"Otter note {i} for {ctx.tenant}: otters hold hands.")
    first = search(engine, quiet, "otters hold hands", limit=1)
    assert "next_page_cursor" in first
    for _ in range(20):
        search(engine, noisy, "otters hold hands", limit=1)
    page_two = search(engine, quiet, "otters hold hands", limit=1, page_cursor=first["next_page_cursor"])
    assert page_two["records"][0]["rank"] == 2
    if backend == "postgres":
        return  # replicas keep snapshots in the shared store, by age only: nothing is evicted
    # the noisy tenant's own oldest cursors are the ones that went
    cursors = [search(engine, noisy, "otters hold hands", limit=1)["next_page_cursor"] for _ in range(6)]
    assert (
        error_of(search, engine, noisy, "otters hold hands", limit=1, page_cursor=cursors[0]).code
        is ErrorCode.STALE_PAGE
    )
