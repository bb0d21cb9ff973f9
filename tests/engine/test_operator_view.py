"""What the engine tells an operator's view (the console) without any content: the
store's kind, the profiles served, records about to expire, pending purges and who
owes them, and each scope's index bytes. On both stores."""

from __future__ import annotations

import time

from engine_support import Backend, accept, context, forget

from engram.ranking import HYBRID_PROFILE, LEXICAL_PROFILE
from engram.service.engine import Engine, Operator

CTX = context(workspace="view")
DAY_MS = 24 * 3600 * 1000


def _instant(ms: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ms // 1000)) + f".{ms % 1000:03d}Z"


def test_the_operator_role_has_its_own_object(engine):
    """What only an operator may do or see hangs off ``engine.operator``; the engine the
    agent path holds answers none of it under the same name."""
    role = {name for name in vars(Operator) if not name.startswith("_")}
    assert {"backup", "rotate_kek", "transition", "replay_search", "set_tenant_enabled"} <= role
    assert not role & {name for name in dir(Engine) if not name.startswith("_")}
    assert isinstance(engine.operator, Operator)


def test_the_store_kind_and_the_profiles(engine):
    assert engine.operator.store_kind == ("postgresql" if Backend.database_url else "sqlite")
    served = {(p["name"], p["version"], p["config_digest"]) for p in engine.operator.profiles()}
    assert served == {(p.name, p.version, p.config_digest()) for p in (LEXICAL_PROFILE, HYBRID_PROFILE)}


def test_records_expiring_before_an_instant(engine):
    now = int(time.time() * 1000)
    retention = {"derivative_rule": "make-ineligible", "expires_at": _instant(now + DAY_MS)}
    soon = accept(engine, CTX, "the rotation schedule moves to Tuesdays", retention=retention)
    accept(engine, CTX, "the rotation schedule has no end date")
    assert engine.operator.expiring_before(now, 10) == (0, [])
    count, (entry,) = engine.operator.expiring_before(now + 2 * DAY_MS, 10)
    assert count == 1
    assert entry == {"tenant": "acme", "workspace": "view", "record_id": soon, "expires_at_ms": now + DAY_MS}
    assert engine.operator.expiring_before(now + 2 * DAY_MS, 10, ("acme", "elsewhere")) == (0, [])


def test_the_expiring_are_counted_whole_and_listed_soonest_first_up_to_the_limit(engine):
    now = int(time.time() * 1000)
    ends = [now + (5 - i) * DAY_MS for i in range(4)]  # the last captured ends first
    ids = [
        accept(
            engine,
            CTX,
            f"the rotation schedule {i} ends",
            retention={"derivative_rule": "make-ineligible", "expires_at": _instant(at)},
        )
        for i, at in enumerate(ends)
    ]
    other = context(workspace="view-other")
    accept(
        engine,
        other,
        "the other rotation ends",
        retention={"derivative_rule": "make-ineligible", "expires_at": _instant(now + DAY_MS)},
    )
    count, listed = engine.operator.expiring_before(now + 6 * DAY_MS, 2, ("acme", "view"))
    assert count == 4
    assert [e["record_id"] for e in listed] == [ids[3], ids[2]]
    count, listed = engine.operator.expiring_before(now + 6 * DAY_MS, 1)
    assert count == 5 and listed[0]["workspace"] == "view-other"


def test_index_bytes_grow_with_what_a_scope_holds(engine):
    empty = engine.operator.index_bytes(("acme", "nothing-here"))
    assert empty == {"lexical": 0, "semantic": 0}
    accept(engine, CTX, "the billing ledger lives in PostgreSQL")
    held = engine.operator.index_bytes(("acme", "view"))
    assert held["lexical"] > 0 and held["semantic"] > 0


def test_a_purge_is_listed_until_it_is_done(engine):
    record = accept(engine, CTX, "the old runbook for the queue cluster")
    forget(engine, CTX, record)
    listed = engine.operator.pending_purges()
    assert all(set(p) == {"tenant", "workspace", "record_id", "owed_by"} for p in listed)
    engine.operator.sweep_invalidations()
    assert [p for p in engine.operator.pending_purges() if p["record_id"] == record] == []
