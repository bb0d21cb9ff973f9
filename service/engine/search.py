"""search: rank, re-check every candidate against the store, redact, fit the budget.

Rank order is never authorisation: the ranking subsystem proposes, and each candidate
is re-read from the store (state, valid time, retention, scope) before it is disclosed.
The profile follows `capability_policy.minimum_channels`: `lexical_and_semantic` needs
the semantic channel and is RANKING_UNAVAILABLE without it (never a silent fallback);
`lexical` still uses the semantic channel whenever it is healthy, and the receipt names
the channels that ran.

Packet budget: records are added in rank order while the whole success envelope
(`models.envelope.success_size`) fits `max_packet_bytes`; the rest goes to the next
page. A record that alone cannot fit is PROJECTION_OVERSIZED; a response whose fixed
part (receipt, digests, cursor) cannot fit even with no record is RESULT_TOO_LARGE.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from engram.models.codes import ContractError, ErrorCode
from engram.models.digests import DigestKind, digest, seal_receipt
from engram.models.envelope import success_size
from engram.models.inputs import SearchInput
from engram.models.outputs import contribution_wire
from engram.models.scope import Scope
from engram.models.tools import SEARCH
from engram.ranking import HYBRID_PROFILE, LEXICAL_PROFILE, Profile, RankedList, SemanticUnavailable
from engram.ranking.profiles import LEXICAL
from engram.ranking.query_time import QueryTime

from .clock import instant, now_ms, parse_instant
from .context import CallContext
from .dependencies import Dependencies
from .paging import PagePosition, Snapshot
from .projector import ProjectionView
from .reading import disclosed_record, eligible, revalidation_receipt
from .records import authorization_receipt, scope_key


class PageEntry(NamedTuple):
    """A record the page may return, as the budget pass needs it."""

    resume_at: int  # the snapshot index just after it, where a next page resumes
    contribution: dict[str, Any]  # its ChannelContribution, wire form
    record: dict[str, Any]  # disclosed (redacted)
    redacted_fields: list[str]
    redaction_receipt_digest: str


CANDIDATE_CAP = 1000
SEMANTIC_LAG_BOUND = 1000
#: Journal events the lexical channel may trail by when this search could not catch it
#: up itself because another call's catch-up holds the projector (as for semantic).
#: While a warm-up or rebuild holds it, any lag at all is PROJECTION_STALE: the index
#: may not have seen the scope's records yet, and an empty list would read as "no match".
LEXICAL_LAG_BOUND = 1000
#: How long a search waits for a short catch-up another call is running.
CATCH_UP_WAIT_S = 0.25
#: How long it waits, beyond that, when the events its index has not applied accept
#: records (another call's catch-up is adding them: slow on a slow disk), before it
#: answers PROJECTION_STALE rather than rank without them.
ADDITION_WAIT_S = 5.0


def semantic_problem(deps: Dependencies, scope: Scope, view: ProjectionView) -> str | None:
    """Why the semantic channel cannot serve this scope now, or None when it can."""
    reason = deps.ranker.semantic_health(scope_key(scope))
    if reason is not None:
        return reason
    if view.lags.get("semantic", 0) > SEMANTIC_LAG_BOUND:
        return "semantic projection lags the journal"
    return None


def require_current_projection(deps: Dependencies, scope: Scope) -> ProjectionView:
    """Catch the scope's projections up, or refuse: PROJECTION_STALE (retriable) while
    the lexical channel trails the journal and cannot be caught up now (warm-up,
    rebuild, a dropped legacy layout being re-projected, a scope this replica has only
    begun to project). Returns the view the search then works from (one reading of the
    journal head and the channel cursors).

    Within the lag bound it may rank on an index another call is catching up, as the
    store re-check keeps the answer exact for what the index holds; but not when the
    events the index lacks accept records (an admission acknowledged by its replay, or
    on another replica, while this replica's catch-up crawls on a slow disk): it waits
    for that catch-up, and is PROJECTION_STALE if it does not end."""
    projector = deps.projector
    caught_up, view = projector.try_catch_up(scope, CATCH_UP_WAIT_S)
    if caught_up:
        return view
    # The bound tolerates what concurrent calls appended since the index last caught up;
    # an index that has applied nothing of the scope yet has not caught up once.
    never_applied = view.cursors.get(LEXICAL, 0) == 0
    bound = 0 if projector.long_projection is not None or never_applied else LEXICAL_LAG_BOUND
    if view.lags.get(LEXICAL, 0) > bound:
        raise ContractError(ErrorCode.PROJECTION_STALE)
    if projector.accepts_pending(scope, view.cursors[LEXICAL], view.head):
        caught_up, view = projector.try_catch_up(scope, ADDITION_WAIT_S)
        if not caught_up:
            raise ContractError(ErrorCode.PROJECTION_STALE)
    return view


def require_index_present(deps: Dependencies, scope: Scope) -> None:
    """A scope that holds current records but has no lexical index on disk has lost its
    index: RANKING_UNAVAILABLE (retriable; `engram admin rebuild-projections`), never
    an empty list that reads as "no match"."""
    if deps.ranker.lexical_present(scope_key(scope)):
        return
    if deps.store.live_more_than(scope, 0):
        raise ContractError(ErrorCode.RANKING_UNAVAILABLE)


def choose_profile(deps: Dependencies, scope: Scope, minimum: str, view: ProjectionView) -> Profile:
    healthy = semantic_problem(deps, scope, view) is None
    if minimum == "lexical_and_semantic" and not healthy:
        raise ContractError(ErrorCode.RANKING_UNAVAILABLE)
    return HYBRID_PROFILE if healthy else LEXICAL_PROFILE


def request_fields(args: SearchInput) -> dict[str, Any]:
    """Everything that defines the result list, minus the cursor itself."""
    return args.model_dump(exclude_none=True, exclude={"page_cursor"})


def _rank(
    deps: Dependencies, ctx: CallContext, args: SearchInput, valid_as_of: int, view: ProjectionView
) -> RankedList:
    """Rank with the chosen profile; a semantic fault mid-search falls back to the
    lexical profile over the lexical hits already found, unless the caller requires
    both channels (then RANKING_UNAVAILABLE)."""
    profile = choose_profile(deps, ctx.scope, args.capability_policy.minimum_channels, view)
    both = args.capability_policy.minimum_channels == "lexical_and_semantic"
    try:
        return deps.ranker.search(
            scope_key(ctx.scope),
            args.query,
            profile,
            valid_as_of_ms=valid_as_of,
            candidate_cap=CANDIDATE_CAP,
            fallback=None if both else LEXICAL_PROFILE,
        )
    except SemanticUnavailable:
        raise ContractError(ErrorCode.RANKING_UNAVAILABLE) from None


def _snapshot_for(
    deps: Dependencies, ctx: CallContext, args: SearchInput, binding: str, pinned_valid_as_of: int | None
) -> tuple[Snapshot, PagePosition, dict[str, int]]:
    """The snapshot to page through, where this page starts, and the channel cursors
    the receipt names (for a first page, those the ranking ran at)."""
    if args.page_cursor is None:
        view = require_current_projection(deps, ctx.scope)
        require_index_present(deps, ctx.scope)
        valid_as_of = now_ms() if pinned_valid_as_of is None else pinned_valid_as_of
        ranked = _rank(deps, ctx, args, valid_as_of, view)
        snap = deps.snapshots.put(ctx.tenant, ranked, view.head, valid_as_of)
        return snap, PagePosition(snap.snapshot_id, 0, 0), view.cursors
    position = deps.snapshots.decode(args.page_cursor, binding)
    snap = deps.snapshots.get(position.snapshot_id)
    return snap, position, deps.ranker.projection_cursor(scope_key(ctx.scope))


def search(
    deps: Dependencies, ctx: CallContext, args: SearchInput, *, valid_as_of_ms: int | None = None
) -> dict[str, Any]:
    """`valid_as_of_ms` pins the first page's valid time (receipt replay); callers on
    the agent path leave it to the clock."""
    request = request_fields(args)
    binding = digest(DigestKind.QUERY, {"scope": scope_key(ctx.scope), "request": request, "purpose": ctx.purpose})
    snap, position, cursors = _snapshot_for(deps, ctx, args, binding, valid_as_of_ms)
    ranked = snap.ranked
    ordered = ranked.candidates

    # Re-check candidates from the page position on, in windows, until the page is full:
    # the first window holds as many candidates as the page, so a page whose candidates
    # are all still eligible reads (and builds the contributions of) just those; each
    # further window is twice the last. Each page entry remembers the snapshot index
    # just after it, where a next page resumes.
    page: list[PageEntry] = []
    checked = []
    scan = position.position
    checked_at = now_ms()
    # Each window's rows are read with their data keys by one statement (a join), so a
    # record forgotten concurrently is either still whole or already ineligible, never
    # half gone; no transaction spans the windows (on PostgreSQL, two round trips fewer).
    size = args.limit
    while scan < len(ordered) and len(page) < args.limit:
        window = ordered[scan : scan + size]
        size *= 2
        rows = deps.store.records(ctx.scope, [c.record_id for c in window])
        for contribution in window:
            scan += 1
            row = rows.get(contribution.record_id)
            if not eligible(row, snap.valid_as_of_ms, checked_at):
                continue
            checked.append(row)
            record, redacted, redaction_digest = disclosed_record(deps, row)
            wire = contribution_wire(contribution, contribution.decimals)
            page.append(PageEntry(scan, wire, record, redacted, redaction_digest))
            if len(page) == args.limit:
                break

    # Everything in the receipt that does not depend on how many records fit is
    # computed once per call (the snapshot's own digests once per snapshot), so a
    # budget pass only re-digests the page itself.
    fixed = _receipt_fixed(ctx, args, snap, checked, cursors)

    def build(count: int) -> dict[str, Any]:
        chosen = page[:count]
        resume = chosen[-1].resume_at if chosen else position.position
        if count == len(page) < args.limit:
            resume = len(ordered)  # the scan ran out: nothing eligible is left
        records = [
            {
                "record": entry.record,
                "redacted_fields": entry.redacted_fields,
                "redaction_receipt_digest": entry.redaction_receipt_digest,
                "score": entry.contribution["final_score"],
                "rank": position.returned + i + 1,
            }
            for i, entry in enumerate(chosen)
        ]
        receipt = _receipt(fixed, [entry.contribution for entry in chosen], position)
        value: dict[str, Any] = {"records": records, "rank_receipt": receipt}
        if resume < len(ordered):
            value["next_page_cursor"] = deps.snapshots.encode(
                PagePosition(snap.snapshot_id, resume, position.returned + count), binding
            )
        value["response_digest"] = digest(DigestKind.RESPONSE, value)
        return value

    count = len(page)
    while True:
        value = build(count)
        if success_size(value) <= args.max_packet_bytes:
            return value
        if count == 0:
            raise ContractError(ErrorCode.RESULT_TOO_LARGE)
        if count == 1:
            raise ContractError(ErrorCode.PROJECTION_OVERSIZED)
        count -= 1


def _receipt_fixed(
    ctx: CallContext, args: SearchInput, snap: Snapshot, checked: list[Any], cursors: dict[str, int]
) -> dict[str, Any]:
    """The rank receipt's fields that do not depend on which records fit the budget."""
    ranked = snap.ranked
    profile = ranked.profile
    at = now_ms()
    return {
        "request_digest": digest(DigestKind.REQUEST, args.model_dump(exclude_none=True)),
        "authorization_receipt_digest": authorization_receipt(ctx, SEARCH, at)["receipt_digest"],
        "profile": profile.name,
        "profile_version": profile.version,
        "profile_config_digest": snap.profile_config_digest,
        "channels": list(ranked.channels),
        "valid_as_of": instant(snap.valid_as_of_ms),
        "system_as_of": str(snap.system_as_of),
        "snapshot_id": snap.snapshot_id,
        "snapshot_digest": snap.digests.snapshot_digest,
        "candidate_count": len(ranked.candidate_ids),
        "candidate_ids_digest": snap.digests.candidate_ids_digest,
        "scoring_formula_ref": f"engram.rank/{profile.name}/v{profile.version}",
        "revalidation_receipt_digest": revalidation_receipt(checked, snap.valid_as_of_ms, snap.system_as_of)[
            "receipt_digest"
        ],
        "projection_receipt_digests": [
            digest(DigestKind.PROJECTION_RECEIPT, {"channel": ch, "cursor": str(cursors.get(ch, 0))})
            for ch in ranked.channels
        ],
        "issued_at": instant(at),
        "query_time": _query_time(ranked.query_time),
    }


def _query_time(read: QueryTime) -> dict[str, Any]:
    """The receipt's account of what the profile read of time in the query."""
    window = read.window
    return {
        "asks_when": read.asks_when,
        "valid_time_window": None
        if window is None
        else {
            "valid_from": instant(window.from_ms),
            "valid_until": instant(window.to_ms),
            "text": window.text,
            "period": window.period,
        },
    }


def _receipt(fixed: dict[str, Any], chosen: list[dict[str, Any]], position: PagePosition) -> dict[str, Any]:
    """The rank receipt of a page; ``chosen``: its records' contributions (wire form)."""
    return seal_receipt(
        DigestKind.RANK_RECEIPT,
        {
            **fixed,
            "ordered_ids_digest": digest(DigestKind.IDS, [c["record_id"] for c in chosen]),
            "contributions": chosen,
            "page_offset": position.returned,
        },
    )


def replay(deps: Dependencies, ctx: CallContext, args: SearchInput, receipt: dict[str, Any]) -> dict[str, Any]:
    """Re-run the first page a rank receipt describes, pinned to its valid_as_of, and
    compare. The order can only match while the scope's projection is unchanged since
    the receipt's system_as_of and the profile configuration is the same; the answer
    says which of those held, so a mismatch is explained rather than just reported."""
    if args.page_cursor is not None:
        raise ContractError(ErrorCode.INVALID_SCHEMA)
    if digest(DigestKind.REQUEST, args.model_dump(exclude_none=True)) != receipt["request_digest"]:
        raise ContractError(ErrorCode.DIGEST_CONFLICT)
    again = search(deps, ctx, args, valid_as_of_ms=parse_instant(receipt["valid_as_of"]))["rank_receipt"]
    return {
        "match": again["ordered_ids_digest"] == receipt["ordered_ids_digest"],
        "ordered_ids_digest": again["ordered_ids_digest"],
        "expected_ordered_ids_digest": receipt["ordered_ids_digest"],
        "same_profile": (again["profile"], again["profile_version"], again["profile_config_digest"])
        == (receipt["profile"], receipt["profile_version"], receipt["profile_config_digest"]),
        "journal_unchanged": again["system_as_of"] == receipt["system_as_of"],
        "system_as_of": again["system_as_of"],
    }
