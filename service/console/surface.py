"""Every read the console makes of the engine, in one place.

Why one adapter: the console must see only the operator role's surface
(``engine.operator``, plus the engine's own readiness and counts), never the store
behind it. Pages and the JSON API call these functions and nothing else of the
engine, so a change of that surface touches this module only. What comes back is
plain JSON values: ids, states, counts, cursors, digests, sizes and timings; no
record or candidate text, no query.
"""

from __future__ import annotations

import importlib.metadata
import time
from typing import Any

from engram.models.codes import ContractError
from engram.models.outputs import RankReceipt
from engram.service.engine import Engine
from engram.service.operator.commands import run as run_operator_command

#: Where the console looks for records about to expire.
EXPIRING_WITHIN_MS = 7 * 24 * 3600 * 1000
#: How many expiring records a page lists, those that end first (it counts them all).
LISTED = 50
#: The candidates state an operator must decide (`engram admin adjudicate`).
AWAITING_ADJUDICATION = "pending_adjudication"


def _version() -> str:
    try:
        return importlib.metadata.version("sentropic-engram")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def scopes(engine: Engine, only: tuple[str, str] | None = None) -> list[dict[str, Any]]:
    """Each scope (or ``only`` that one): opt-in, counts by lifecycle state, journal
    head, each running channel's projection cursor and lag behind the head, and its
    index bytes here."""
    rows = []
    enabled: dict[str, bool] = {}
    # Without a model the semantic channel is off by the operator's choice, not behind.
    off = set() if engine.encoder is not None else {"semantic"}
    for stats in engine.scope_stats(only):
        lags = {channel: lag for channel, lag in sorted(stats.projection_lag.items()) if channel not in off}
        tenant, workspace = stats.scope
        if tenant not in enabled:
            enabled[tenant] = engine.tenant_enabled(tenant)
        head = engine.scope_cursor(stats.scope)
        rows.append(
            {
                "tenant": tenant,
                "workspace": workspace,
                "opted_in": enabled[tenant],
                "records": dict(sorted(stats.counts.records.items())),
                "candidates": dict(sorted(stats.counts.candidates.items())),
                "awaiting_adjudication": stats.counts.candidates.get(AWAITING_ADJUDICATION, 0),
                "journal_head": head,
                "lag": lags,
                "cursor": {channel: head - lag for channel, lag in lags.items()},
                "index_bytes": engine.operator.index_bytes(stats.scope),
            }
        )
    return sorted(rows, key=lambda row: (row["tenant"], row["workspace"]))


def overview(engine: Engine, started_at: float) -> dict[str, Any]:
    """The first page: what runs, whether it is ready, and what needs the operator."""
    rows = scopes(engine)
    expiring_count, expiring = engine.operator.expiring_before(int(time.time() * 1000) + EXPIRING_WITHIN_MS, LISTED)
    return {
        "version": _version(),
        "store_kind": engine.operator.store_kind,
        "replica_id": engine.replica_id,
        "readiness": engine.readiness(),
        "uptime_s": round(time.time() - started_at, 1),
        "profiles": engine.operator.profiles(),
        "journal_head": max((row["journal_head"] for row in rows), default=0),
        "scopes": rows,
        "records_by_state": _sum(row["records"] for row in rows),
        "candidates_by_state": _sum(row["candidates"] for row in rows),
        "awaiting_adjudication": sum(row["awaiting_adjudication"] for row in rows),
        "expiring_within_days": EXPIRING_WITHIN_MS // (24 * 3600 * 1000),
        "expiring_count": expiring_count,
        "expiring": expiring,
    }


def scope(engine: Engine, tenant: str, workspace: str) -> dict[str, Any] | None:
    """One scope's row, with its records about to expire and its pending purges; None
    for a scope the store does not know."""
    found = scopes(engine, (tenant, workspace))
    if not found:
        return None
    row = found[0]
    until = int(time.time() * 1000) + EXPIRING_WITHIN_MS
    expiring_count, expiring = engine.operator.expiring_before(until, LISTED, (tenant, workspace))
    purges = [p for p in engine.operator.pending_purges() if (p["tenant"], p["workspace"]) == (tenant, workspace)]
    row.update(expiring_count=expiring_count, expiring=expiring, pending_purges=purges)
    return row


def replicas(engine: Engine) -> dict[str, Any]:
    """The replica registry, scope routes and pending purges (with who still owes each);
    on an embedded store there is no registry, only this process."""
    try:
        registry, routes = engine.operator.replicas(), engine.operator.routes()
        shared = True
    except ContractError:
        registry, routes, shared = [], [], False
    return {
        "shared": shared,
        "store_kind": engine.operator.store_kind,
        "this_replica": engine.replica_id,
        "replicas": registry,
        "routes": routes,
        "pending_purges": engine.operator.pending_purges(),
    }


def receipt_contributions(receipt: dict[str, Any]) -> dict[str, Any]:
    """A rank receipt checked against the contract, reduced to its numbers: each
    candidate's per-channel contributions, the profile and the digests. Raises
    pydantic's ValidationError for anything that is not a rank receipt."""
    parsed = RankReceipt.model_validate(receipt)
    return {
        "profile": parsed.profile,
        "profile_version": parsed.profile_version,
        "profile_config_digest": parsed.profile_config_digest,
        "channels": list(parsed.channels),
        "system_as_of": parsed.system_as_of,
        "candidate_count": parsed.candidate_count,
        "ordered_ids_digest": parsed.ordered_ids_digest,
        "receipt_digest": parsed.receipt_digest,
        "contributions": [c.model_dump() for c in parsed.contributions],
    }


def replay(engine: Engine, tenant: str, workspace: str, arguments: dict[str, Any], receipt: dict[str, Any]) -> Any:
    """Re-run the search a receipt describes under the current profile, exactly as
    `engram admin replay-search` does (the same operator command)."""
    args = {"tenant": tenant, "workspace": workspace, "arguments": arguments, "receipt": receipt}
    return run_operator_command(engine, "replay-search", args)


def keep_recent_searches(engine: Engine) -> None:
    """Have the engine keep its recent searches for the receipts page, from the
    console's start: a server without a console keeps none (they hold queries)."""
    engine.operator.keep_recent_searches()


def recent_receipt(engine: Engine, receipt_digest: str) -> dict[str, Any] | None:
    """A recent search's receipt reduced to its numbers, and its replay under the
    current profile; None once this process no longer keeps it. The search's
    arguments (its query) stay inside: only the replay's verdict comes back."""
    kept = engine.operator.recent_search(receipt_digest)
    if kept is None:
        return None
    tenant, workspace = kept.scope
    try:
        replayed = replay(engine, tenant, workspace, kept.arguments, kept.receipt)
    except ContractError as exc:
        replayed = {"refused": exc.code.value}
    return {"scope": f"{tenant}/{workspace}", "result": receipt_contributions(kept.receipt), "replayed": replayed}


def _sum(counts: Any) -> dict[str, int]:
    total: dict[str, int] = {}
    for one in counts:
        for state, n in one.items():
            total[state] = total.get(state, 0) + n
    return dict(sorted(total.items()))
