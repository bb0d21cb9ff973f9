"""withdraw and forget: confirmation-gated transitions that destroy what they end.

Both answer only after the effect is committed, then finish the physical part (key
bytes out of the WAL; for forget, the record purged from every index) and report it:
`complete` only when it is true, otherwise `pending`, which a background sweep or the
operator's `engram admin sweep-invalidations` completes. The first answer is what the
idempotency reservation replays, so it is written back once the physical outcome is
known. A forget in a scope larger than the schedule's inline limit (see :mod:`.sweeper`)
leaves the purge to the background sweep at once and answers `pending` as committed.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engram.models.codes import ContractError, ErrorCode
from engram.models.digests import DigestKind, seal_receipt
from engram.models.inputs import ForgetInput, WithdrawInput
from engram.models.scope import Scope
from engram.models.tools import FORGET, WITHDRAW
from engram.service.store.base import JournalEvent, Store, Transaction

from .clock import instant, now_ms
from .context import CallContext
from .dependencies import Dependencies
from .gates import require_confirmation
from .idempotency import after_commit, find_replay, intent_hash, reserve, rewrite
from .lifecycle import CandidateState, RecordState, require_forgettable, require_pending
from .records import authorization_receipt, scope_key, transaction_receipt
from .sealing import record_shred, shred_digest, shred_entries, shred_positioned

logger = logging.getLogger("engram.keys")

# With replicas sharing the store: how long a forget waits for every live replica to
# purge its own indexes before it answers `pending` (finished as they catch up).
PEER_PURGE_WAIT_S = 3.0


@dataclass(frozen=True)
class Shred:
    """What a transition destroys, for the shred ledger: "record" or "candidate", its id,
    and the journal cursor of the event that made it (its acceptance or capture)."""

    kind: str
    subject: str
    made_cursor: int


# (tx, at_ms) -> (from_state, to_state, event, shred) after applying the effect; raises on refusal
Effect = Callable[[Transaction, int], tuple[str, str, JournalEvent, Shred | None]]


def _transition(
    deps: Dependencies,
    ctx: CallContext,
    tool: str,
    operation: str,
    arguments: dict[str, Any],
    effect: Effect,
    ended: Callable[[Transaction], Shred | None],
    physical: dict[str, str],
) -> tuple[dict[str, Any], bool]:
    """Run a gated transition; returns (result, replayed).

    `ended` reads, in a replay, what the committed transition destroyed (its subject
    and the cursor that made it). `physical` is the physical outcome as committed
    (every field "pending"): should the process die before `_finish` writes the real
    outcome back, a replay still answers a complete, truthful result rather than one
    missing key_destruction or projection_invalidation."""
    intent = intent_hash(tool, arguments)
    key = arguments["idempotency_key"]
    key_dir = deps.vault.ring.key_dir
    with deps.store.transaction() as tx:
        at = now_ms()
        replay = find_replay(tx, ctx.scope, ctx.principal, key, tool, intent)
        if replay is not None:
            # The first answer may have been cut between its commit and its positioned
            # entry (a crash, a failover): written now, once, for a subject the first
            # answer recorded before its commit.
            shred = ended(tx)
            if shred is not None and shred_positioned(key_dir, shred.kind, ctx.scope, shred.subject) is not False:
                shred = None
            result = replay
        else:
            from_state, to_state, event, shred = effect(tx, at)
            require_confirmation(ctx, tool, arguments, at, tx.claim_confirmation)
            if shred is not None:
                # Recorded once the gate passed and before commit, so a restore of any
                # earlier backup applies it (`engram admin restore`, `apply-shred-ledger`);
                # should the commit then fail, those forget what the confirmed call meant
                # to forget anyway.
                record_shred(key_dir, shred.kind, ctx.scope, shred.subject)
            auth = authorization_receipt(ctx, tool, at)
            receipt = {
                "event_id": event.event_id,
                "operation": operation,
                "from_state": from_state,
                "to_state": to_state,
                "cursor": str(event.cursor),
                "event_digest": event.event_digest,
                "authorization_receipt_digest": auth["receipt_digest"],
                "transaction_receipt_digest": transaction_receipt(tool, [event.event_digest], event.cursor, at)[
                    "receipt_digest"
                ],
            }
            result = {"receipt": receipt, "replayed": False, **physical}
            reserve(tx, ctx.scope, ctx.principal, key, tool, intent, result)
        made = (
            None if shred is None else deps.store.journal_digests(ctx.scope, [shred.made_cursor]).get(shred.made_cursor)
        )
    if shred is not None and made is not None:  # None: no event at made_cursor (nothing to check by)
        # Committed for certain: an open of a store that has the subject but not this
        # event (restored from before it) re-applies it.
        record_shred(
            key_dir,
            shred.kind,
            ctx.scope,
            shred.subject,
            made=(shred.made_cursor, made),
            ended=(int(result["receipt"]["cursor"]), result["receipt"]["event_digest"]),
        )
    return result, replay is not None


def _finish(deps: Dependencies, ctx: CallContext, key: str, result: dict[str, Any]) -> dict[str, Any]:
    with deps.store.transaction() as tx:
        rewrite(tx, ctx.scope, ctx.principal, key, result)
    return result


def withdraw(deps: Dependencies, ctx: CallContext, args: WithdrawInput) -> dict[str, Any]:
    arguments = args.model_dump(exclude_none=True)

    def effect(tx: Transaction, at: int) -> tuple[str, str, JournalEvent, Shred | None]:
        candidate = tx.candidate(ctx.scope, args.candidate_id)
        if candidate is None:
            raise ContractError(ErrorCode.NOT_FOUND)
        require_pending(candidate.state)
        event = tx.append_event(
            ctx.scope,
            "candidate_withdrawn",
            candidate.candidate_id,
            {"reason_ref": args.reason_ref, "principal": ctx.principal},
            instant(at),
        )
        shred = None
        if candidate.key_id is not None:
            shred = Shred("candidate", candidate.candidate_id, candidate.created_cursor)
            tx.destroy_key(candidate.key_id)
        tx.set_candidate_state(ctx.scope, candidate.candidate_id, CandidateState.WITHDRAWN, drop_body=True)
        return CandidateState.PENDING, CandidateState.WITHDRAWN, event, shred

    def ended(tx: Transaction) -> Shred | None:
        candidate = tx.candidate(ctx.scope, args.candidate_id)
        return None if candidate is None else Shred("candidate", candidate.candidate_id, candidate.created_cursor)

    result, was_replay = _transition(
        deps, ctx, WITHDRAW, "withdraw", arguments, effect, ended, {"key_destruction": "pending"}
    )
    if was_replay:
        return result
    with after_commit():
        destroyed = deps.store.purge_freed_pages()
        return _finish(
            deps, ctx, args.idempotency_key, {**result, "key_destruction": "complete" if destroyed else "pending"}
        )


def forget(deps: Dependencies, ctx: CallContext, args: ForgetInput) -> dict[str, Any]:
    arguments = args.model_dump(exclude_none=True)

    def effect(tx: Transaction, at: int) -> tuple[str, str, JournalEvent, Shred | None]:
        record = tx.record(ctx.scope, args.record_id)
        if record is None:
            raise ContractError(ErrorCode.NOT_FOUND)
        require_forgettable(record.state)
        event = tx.append_event(
            ctx.scope,
            "record_tombstoned",
            record.record_id,
            {"reason_ref": args.reason_ref, "principal": ctx.principal, "from_state": record.state},
            instant(at),
        )
        if record.key_id is not None:
            tx.destroy_key(record.key_id)
        tx.set_record_state(ctx.scope, record.record_id, RecordState.TOMBSTONED, drop_body=True)
        tx.add_pending_purge(ctx.scope, record.record_id)
        return record.state, RecordState.TOMBSTONED, event, Shred("record", record.record_id, record.accepted_cursor)

    def ended(tx: Transaction) -> Shred | None:
        record = tx.record(ctx.scope, args.record_id)
        return None if record is None else Shred("record", record.record_id, record.accepted_cursor)

    result, was_replay = _transition(
        deps, ctx, FORGET, "tombstone", arguments, effect, ended, {"projection_invalidation": "pending"}
    )
    if was_replay:
        return result
    with after_commit():
        if deps.store.live_more_than(ctx.scope, deps.purge.inline_records):
            # Out of every search from the commit on: search re-checks each candidate
            # against the store, and its catch-up (or the next admission's) deletes the
            # record from the lexical index and hides it in the graph, which needs no
            # wait here behind a catch-up embedding an admission. The rewrite of the
            # scope's files, which grows with the scope, runs in the background sweeper.
            # The answer is the one reserved at the commit (`pending`): nothing to rewrite.
            deps.sweeper.schedule(lambda: sweep_owed(deps))
            return result
        try:
            coverage = invalidate(deps, ctx.scope, [args.record_id], peers_wait_s=PEER_PURGE_WAIT_S)
        finally:
            # Until its purge is done here (an index that cannot be written now: a full
            # disk), the sweeper keeps trying, so `pending` completes without a restart.
            if owed(deps):
                deps.sweeper.schedule(lambda: sweep_owed(deps))
        return _finish(
            deps,
            ctx,
            args.idempotency_key,
            {
                **result,
                "projection_invalidation": "complete" if coverage["complete"] else "pending",
                "coverage_receipt_digest": coverage["receipt_digest"],
            },
        )


def invalidate(deps: Dependencies, scope: Scope, record_ids: list[str], *, peers_wait_s: float = 0.0) -> dict[str, Any]:
    """Remove records from every projection and purge their bytes; a coverage receipt
    says what was reached. With replicas, this one's purge is acknowledged in the store
    and `complete` also needs every live replica's (waiting up to `peers_wait_s`)."""
    deps.projector.catch_up(scope)
    indexes = deps.ranker.purge(scope_key(scope), record_ids)
    store = deps.store.purge_freed_pages()
    replicas = True
    if indexes and store:
        if deps.replica is None:
            deps.store.clear_pending_purges(scope, record_ids)
        else:
            replicas = deps.replica.acknowledge(scope, record_ids, peers_wait_s)
    return seal_receipt(
        DigestKind.COVERAGE_RECEIPT,
        {
            "record_ids": sorted(record_ids),
            "indexes_purged": indexes,
            "store_purged": store,
            "complete": indexes and store and replicas,
            "checked_at": instant(now_ms()),
        },
    )


def owed(deps: Dependencies) -> dict[Scope, list[str]]:
    """Records a forget left pending that this process has still to purge (with
    replicas: this replica's own acknowledgement missing), by scope."""
    return deps.store.pending_purges() if deps.replica is None else deps.replica.awaiting()


def sweep_pending(deps: Dependencies) -> int:
    """Purge every record a forget left pending (with replicas: pending here, on this
    replica's indexes); returns how many scopes were swept."""
    pending = owed(deps)
    for scope, record_ids in pending.items():
        invalidate(deps, scope, record_ids)
    deps.store.purge_freed_pages()
    return len(pending)


def sweep_owed(deps: Dependencies) -> bool:
    """The background sweeper's step: sweep, then whether nothing is owed here any more
    (False: it tries again later)."""
    sweep_pending(deps)
    return not owed(deps)


SHRED_REASON = "restore:shred-ledger"
#: The journal events that end a record or a candidate for good, by ledger kind.
ENDING_EVENTS = {"record": "record_tombstoned", "candidate": "candidate_withdrawn"}


def apply_shreds(store: Store, entries: list[dict[str, Any]], key_dir: Path | None = None) -> int:
    """Re-apply forgets and withdrawals a restored backup predates: each entry's record is
    tombstoned (its key destroyed, its purge left pending for the warm-up's sweep), each
    candidate withdrawn, with a journal event saying why. Entries name scope and subject
    by digest; subjects are found through the journal. With `key_dir`, each subject found
    gets a committed ledger entry naming the event that now ends it, so that later opens
    find nothing to re-apply. Returns how many were applied."""
    wanted: dict[str, set[Scope]] = {}
    for entry in entries:
        wanted.setdefault(entry["scope"], set()).add((entry["kind"], entry["subject"]))
    applied = 0
    at = instant(now_ms())
    for scope in store.scopes():
        targets = wanted.get(shred_digest(list(scope)))
        if not targets:
            continue
        made: dict[str, tuple[int, str]] = {}
        ended: dict[Scope, tuple[int, str]] = {}
        for e in store.events(scope):
            made.setdefault(e.subject, (e.cursor, e.event_digest))
            for kind, ending in ENDING_EVENTS.items():
                if e.kind == ending:
                    ended[(kind, e.subject)] = (e.cursor, e.event_digest)
        named = {s: shred_digest(s) for s in made}
        found = [(kind, s) for s in made for kind in ENDING_EVENTS if (kind, named[s]) in targets]
        with store.transaction() as tx:
            for kind, subject in found:
                event = _apply_shred(tx, scope, kind, subject, at)
                if event is not None:
                    applied += 1
                    ended[(kind, subject)] = (event.cursor, event.event_digest)
        if key_dir is not None:
            for kind, subject in found:
                if (kind, subject) in ended:
                    record_shred(key_dir, kind, scope, subject, made=made[subject], ended=ended[(kind, subject)])
    store.purge_freed_pages()
    return applied


def reapply_shreds(store: Store, key_dir: Path) -> int:
    """Re-apply the committed ledger entries a restored database predates: those whose
    subject's ``made`` event this journal holds while no entry of the subject has its
    ``ended`` event here (a journal without ``made`` never had the subject, or diverged
    before it: nothing to forget). Run at every open, before anything is projected or
    served: a primary-key lookup per entry, and a journal scan of a scope only when it
    has something to re-apply (once: the re-application is recorded in the ledger).
    Entries without positions (written before a commit, or before entries had them) are
    applied by `apply_shreds` alone (`engram admin restore`, `apply-shred-ledger`).
    Returns how many were applied."""
    groups: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    for entry in shred_entries(key_dir):
        if "made" in entry and "ended" in entry:
            groups.setdefault((entry["scope"], entry["kind"], entry["subject"]), []).append(entry)
    if not groups:
        return 0
    due: list[dict[str, Any]] = []
    for scope in store.scopes():
        named = shred_digest(list(scope))
        mine = [g for key, g in groups.items() if key[0] == named]
        if not mine:
            continue
        held = store.journal_digests(scope, sorted({e[side][0] for g in mine for e in g for side in ("made", "ended")}))
        due += [
            g[0] for g in mine if any(_held(held, e["made"]) for e in g) and not any(_held(held, e["ended"]) for e in g)
        ]
    if not due:
        return 0
    applied = apply_shreds(store, due, key_dir)
    logger.warning(
        "re-applied %d forget(s)/withdrawal(s) the store predates (a database restored from a backup)", applied
    )
    return applied


def _held(digests: dict[int, str], position: list[Any]) -> bool:
    """Whether the journal positions read (`Store.journal_digests`) hold this event."""
    return digests.get(int(position[0])) == position[1]


def _apply_shred(tx: Transaction, scope: Scope, kind: str, subject: str, at: str) -> JournalEvent | None:
    """End one subject again; the event that does, or None when it was ended already."""
    if kind == "record":
        record = tx.record(scope, subject)
        if record is None or record.state == RecordState.TOMBSTONED:
            return None
        event = tx.append_event(
            scope,
            "record_tombstoned",
            record.record_id,
            {"reason_ref": SHRED_REASON, "principal": "operator", "from_state": record.state},
            at,
        )
        if record.key_id is not None:
            tx.destroy_key(record.key_id)
        tx.set_record_state(scope, record.record_id, RecordState.TOMBSTONED, drop_body=True)
        tx.add_pending_purge(scope, record.record_id)
        return event
    candidate = tx.candidate(scope, subject)
    if candidate is None or candidate.key_id is None:
        return None
    event = tx.append_event(
        scope, "candidate_withdrawn", candidate.candidate_id, {"reason_ref": SHRED_REASON, "principal": "operator"}, at
    )
    tx.destroy_key(candidate.key_id)
    tx.set_candidate_state(scope, candidate.candidate_id, CandidateState.WITHDRAWN, drop_body=True)
    return event
