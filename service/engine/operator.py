"""The operator role's surface on an open engine: what the host's operators may do and
see, and the agent path (MCP) never reaches.

"Operator" names three things in engram, each in its own place:

- the operator *role* (this module): the principal that opts tenants in, moves records
  between non-terminal states (the contract's operator transitions: dispute, resolve,
  supersede, expire, invalidate-trust), adjudicates, rotates keys, backs up, rebuilds
  projections and reads counts, digests and receipts. Its methods hang off
  :attr:`Engine.operator <.engine.Engine.operator>`, so ``Engine`` itself keeps what the
  agent path and the server's lifecycle need;
- the operator *channel* (``service/operator``): the Unix socket a live server listens
  on, through which ``engram admin`` runs these methods in the server's process;
- the operator *console* (``service/console``): a web page that reads them.

The transitions are journal events like any other; the projector drops the record from
the indexes because only accepted_current is ever ranked or disclosed.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from engram.models.codes import ContractError, ErrorCode
from engram.models.scope import Scope
from engram.models.tools import SEARCH, parse_arguments
from engram.ranking import HYBRID_PROFILE, LEXICAL_PROFILE
from engram.service.secrets import scan as scan_secrets

from . import admission, export, search, transitions
from . import routing as routing_ops
from .clock import instant, now_ms
from .context import CallContext
from .data_directory import DB_FILE
from .dependencies import Dependencies
from .lifecycle import operator_target
from .policy import ADMISSION_POLICY_FILE, HOST_POLICY_FILE
from .recent_searches import RecentSearch, RecentSearches
from .records import scope_key
from .sealing import copy_key_dir, shred_entries
from .seed import write_seed


class Operator:
    """The operator role's methods over one engine's dependencies (see the module)."""

    def __init__(self, deps: Dependencies, recent_searches: RecentSearches) -> None:
        self.deps = deps
        self._recent_searches = recent_searches

    def set_tenant_enabled(self, tenant: str, enabled: bool) -> None:
        self.deps.store.set_tenant_enabled(tenant, enabled, instant(now_ms()))

    def tenants_not_opted_in(self) -> list[str]:
        """Tenants that hold scopes in this store but are not opted in: every agent call
        in their scopes is refused (-32603) until an operator runs `engram admin tenant
        enable TENANT`. Bulk ingest writes a scope without opting its tenant in (opt-in is
        the operator's separate decision), so `engram ingest` and `engram serve` name them."""
        store = self.deps.store
        return [
            tenant for tenant in sorted({tenant for tenant, _ in store.scopes()}) if not store.tenant_enabled(tenant)
        ]

    def export_records(self, scope: Scope, *, vectors: bool = False) -> Iterator[export.ExportedRecord]:
        """The scope's current records (payload, evidence, retention; with ``vectors``
        their indexed passage vectors too), in record_id order (see :mod:`.export`)."""
        return export.export_records(self.deps, scope, vectors=vectors)

    def export_vectors(self, out: Path) -> dict[str, Any]:
        """Write every scope's current records' passage vectors, with their passage-text
        digests and this engine's vector space, to the new directory ``out``: the seed a
        new replica warms up from (``seed_vectors``) without embedding them again. A
        CAPABILITY_UNAVAILABLE without a named encoder (the vectors' model is unknown)."""
        space = self.deps.ranker.vector_space
        if space.encoder is None:
            raise ContractError(ErrorCode.CAPABILITY_UNAVAILABLE)
        scopes = self.deps.store.scopes()
        return write_seed(Path(out), space, ((scope_key(s), self.export_records(s, vectors=True)) for s in scopes))

    def store_footprint(self) -> dict[str, int]:
        """Bytes each store table holds on disk, indexes included (capacity reports)."""
        return self.deps.store.footprint()

    def receipt(self, receipt_digest: str) -> dict[str, Any] | None:
        """A receipt a record body references by digest (authorisation, decision)."""
        return self.deps.store.receipt(receipt_digest)

    def sweep_invalidations(self) -> int:
        """Complete physical purges left pending (a forgotten record's bytes still in an
        index file, key bytes still in the WAL). Returns how many scopes were swept."""
        return transitions.sweep_pending(self.deps)

    def transition(self, scope: Scope, record_id: str, operation: str, reason_ref: str) -> str:
        """dispute | resolve | supersede | expire | invalidate-trust one record."""
        return transition(self.deps, scope, record_id, operation, reason_ref)

    def adjudicate(self, scope: Scope, candidate_id: str, decision: str, reason_ref: str) -> dict[str, Any]:
        """Accept or reject a candidate held as pending_adjudication."""
        return admission.adjudicate(self.deps, scope, candidate_id, decision, reason_ref)  # type: ignore[arg-type]

    def expire_due(self) -> list[tuple[Scope, str]]:
        return expire_due(self.deps)

    def keep_recent_searches(self) -> None:
        """From now on, keep the last searches (their receipts, and the arguments a replay
        needs, query included) in memory for an operator console to pick; a server
        without a console keeps none."""
        self._recent_searches.keep()

    def recent_search(self, receipt_digest: str) -> RecentSearch | None:
        """A search this process answered lately, by its rank receipt's digest (the one
        its audit line names), with what a replay needs; None once it is no longer kept,
        or when none is kept (`keep_recent_searches`)."""
        return self._recent_searches.get(receipt_digest)

    def replay_search(self, ctx: CallContext, arguments: dict[str, Any], receipt: dict[str, Any]) -> dict[str, Any]:
        """Re-run a search pinned to a rank receipt (operator surface; see search.replay)."""
        args = parse_arguments(SEARCH, arguments)
        return search.replay(self.deps, ctx, args, receipt)  # type: ignore[arg-type]

    def rotate_kek(self) -> str:
        return self.deps.vault.ring.rotate(self.deps.store)

    def backup(self, dest: Path, *, include_keys: bool = False) -> Path:
        """A consistent online backup: the database, the policies and the vectors (so a
        restore does not re-embed). Without `include_keys` it holds no KEK: it cannot be
        read without the live keys (or an export), whose shred ledger a restore applies.
        The lexical index is rebuilt on restore (it holds text, and is cheap to rebuild)."""
        dest = Path(dest)
        dest.mkdir(parents=True, exist_ok=False, mode=0o700)
        ring = self.deps.vault.ring
        semantic = self.deps.data_dir / "index" / "semantic"
        with self.deps.projector.exclusive():
            # Vectors first, at or behind the database's journal: a restore catches up.
            self.deps.ranker.checkpoint()
            # A background save that began before the checkpoint ends (discarded, its
            # files removed) before the directory is copied, never during the copy.
            self.deps.ranker.settle()
            if semantic.is_dir():
                shutil.copytree(semantic, dest / "index" / "semantic")
            self.deps.store.backup(str(dest / DB_FILE))
        if include_keys:
            copy_key_dir(ring.key_dir, dest / "keys")
        for name in (HOST_POLICY_FILE, ADMISSION_POLICY_FILE):
            if (self.deps.data_dir / name).exists():
                shutil.copy2(self.deps.data_dir / name, dest / name)
        for path in (dest, *dest.rglob("*")):  # the owner's alone, as the data directory is
            os.chmod(path, 0o700 if path.is_dir() else 0o600)
        return dest

    def apply_shred_ledger(self) -> int:
        """Apply every entry of the key directory's shred ledger, also those without
        journal positions (written before entries had them), which opening a store does
        not check: each record or candidate it names that is not yet tombstoned or
        withdrawn is (scans the journal of each scope the ledger names; idempotent).
        Returns how many were applied; their index purges are swept at once."""
        key_dir = self.deps.vault.ring.key_dir
        applied = transitions.apply_shreds(self.deps.store, shred_entries(key_dir), key_dir)
        if applied:
            self.sweep_invalidations()
        return applied

    def verify_journal(self) -> dict[str, bool]:
        return {f"{t}/{w}": self.deps.store.verify_chain((t, w)) for t, w in self.deps.store.scopes()}

    def rebuild_projections(self, progress: Callable[[int], None] | None = None) -> None:
        self.deps.projector.rebuild(progress)

    def history(self, scope: Scope, subject: str) -> list[dict[str, Any]]:
        """Every journal event about one record or candidate (digests only, no content)."""
        return [
            {
                "cursor": e.cursor,
                "kind": e.kind,
                "event_id": e.event_id,
                "recorded_at": e.recorded_at,
                "event_digest": e.event_digest,
                "body": e.body,
            }
            for e in self.deps.store.events(scope)
            if e.subject == subject or e.body.get("candidate_id") == subject
        ]

    @property
    def store_kind(self) -> str:
        """``postgresql`` for a store several replicas share, else ``sqlite``."""
        return "postgresql" if self.deps.replica is not None else "sqlite"

    def profiles(self) -> list[dict[str, str]]:
        """The ranking profiles this release serves: name, version, configuration digest."""
        return [
            {"name": p.name, "version": p.version, "config_digest": p.config_digest()}
            for p in (LEXICAL_PROFILE, HYBRID_PROFILE)
        ]

    def expiring_before(self, at_ms: int, limit: int, only: Scope | None = None) -> tuple[int, list[dict[str, Any]]]:
        """How many current records' retention ends by ``at_ms`` (in ``only``, or in
        every scope), and the ``limit`` that end first (ids and instants only)."""
        count, rows = self.deps.store.due_for_expiry_page(at_ms, limit, only)
        return count, [
            {"tenant": r.scope[0], "workspace": r.scope[1], "record_id": r.record_id, "expires_at_ms": r.expires_at_ms}
            for r in rows
        ]

    def pending_purges(self) -> list[dict[str, Any]]:
        """Forgotten records whose bytes some index still holds, each with the replicas
        that still owe their purge (on an embedded store: none named, this process's
        sweeper owes them)."""
        owed: dict[tuple[str, str, str], list[str]] = {}
        if self.deps.replica is not None:
            shared = self.deps.replica.deployment
            for entry in shared.replica_entries():
                for scope, ids in shared.purges_awaiting(entry.replica_id).items():
                    for record_id in ids:
                        owed.setdefault((*scope, record_id), []).append(entry.replica_id)
        return [
            {"tenant": t, "workspace": w, "record_id": r, "owed_by": sorted(owed.get((t, w, r), []))}
            for (t, w), ids in sorted(self.deps.store.pending_purges().items())
            for r in sorted(ids)
        ]

    def index_bytes(self, scope: Scope) -> dict[str, int]:
        """Bytes each index channel of the scope takes on this replica's disk."""
        return self.deps.ranker.index_bytes(scope_key(scope))

    def replicas(self) -> list[dict[str, Any]]:
        """The replicas registered on a shared store (operator surface)."""
        if self.deps.replica is None:
            raise ContractError(ErrorCode.CAPABILITY_UNAVAILABLE)
        return self.deps.replica.registry()

    def routes(self) -> list[dict[str, Any]]:
        """Every routed scope and its group (operator surface; shared store only)."""
        if self.deps.replica is None:
            raise ContractError(ErrorCode.CAPABILITY_UNAVAILABLE)
        return routing_ops.routes(self.deps.replica.deployment)

    def move_scope(
        self, scope: Scope, group: str, *, project_wait_s: float = 300.0, release_wait_s: float = 30.0
    ) -> routing_ops.MoveOutcome:
        """Move a scope to another replica group (operator surface; see
        :func:`.routing.move`). Raises routing.NoLiveReplica when the group has none."""
        if self.deps.replica is None:
            raise ContractError(ErrorCode.CAPABILITY_UNAVAILABLE)
        return routing_ops.move(
            self.deps.replica.deployment, scope, group, project_wait_s=project_wait_s, release_wait_s=release_wait_s
        )

    def retire_replica(self, replica_id: str) -> bool:
        """Remove a replica gone for good, so the purges it owed stop being pending. A
        replica retired by mistake re-registers when it next starts; its indexes may
        then hold purged records: rebuild its projections before it serves."""
        if self.deps.replica is None:
            raise ContractError(ErrorCode.CAPABILITY_UNAVAILABLE)
        return self.deps.replica.deployment.retire_replica(replica_id)


def transition(deps: Dependencies, scope: Scope, record_id: str, operation: str, reason_ref: str) -> str:
    """Apply one operator transition; returns the new state."""
    scan_secrets(reason_ref).refuse()  # the journal can never be erased
    with deps.store.transaction() as tx:
        record = tx.record(scope, record_id)
        if record is None:
            raise ContractError(ErrorCode.NOT_FOUND)
        target = operator_target(operation, record.state)
        tx.append_event(
            scope,
            "record_state_changed",
            record_id,
            {
                "operation": operation,
                "from_state": record.state,
                "to_state": target,
                "reason_ref": reason_ref,
                "principal": "operator",
            },
            instant(now_ms()),
        )
        tx.set_record_state(scope, record_id, target, drop_body=False)
    deps.projector.catch_up(scope)
    return target


def expire_due(deps: Dependencies, at_ms: int | None = None) -> list[tuple[Scope, str]]:
    """Expire every record whose retention `expires_at` has passed."""
    at = now_ms() if at_ms is None else at_ms
    expired = []
    for row in deps.store.due_for_expiry(at):
        transition(deps, row.scope, row.record_id, "expire", "retention:expires_at")
        expired.append((row.scope, row.record_id))
    return expired
