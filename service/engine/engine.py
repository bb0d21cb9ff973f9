"""The memory engine: the contract's six operations over the store and the indexes.

Usable without a server (the CLI, bulk ingestion and evaluation call it directly). It
trusts the CallContext it is given: verifying the host is the front end's job.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from engram.models.codes import ContractError, ErrorCode
from engram.models.scope import Scope
from engram.models.tools import CAPTURE, FORGET, GET, REQUEST_ADMISSION, SEARCH, TOOLS, WITHDRAW, parse_arguments
from engram.ranking import (
    HYBRID_PROFILE,
    LEXICAL_PROFILE,
    Device,
    Encoder,
    MiniLMEncoder,
    Ranker,
    SemanticUnavailable,
)
from engram.ranking.encoder import resolve_device
from engram.service.secrets import detector as secret_detector
from engram.service.secrets import refuse_secrets
from engram.service.store import open_store
from engram.service.store.base import (
    DEFAULT_DATABASE_TIMEOUT_MS,
    DEFAULT_GROUP,
    CommitUncertain,
    SharedStore,
    StoreUnavailable,
)
from engram.service.store.connectivity import ConnectivityState

from . import admission, capture, export, ingestion, operator, reading, search, transitions
from . import routing as routing_ops
from .clock import instant, now_ms
from .context import CallContext
from .data_directory import claim_data_dir
from .dependencies import Dependencies
from .paging import SnapshotCache
from .policy import ADMISSION_POLICY_FILE, HOST_POLICY_FILE, Policies
from .projector import Projector
from .recent_searches import RecentSearch, RecentSearches
from .records import scope_key
from .replica import Replica, replica_id_for
from .sealing import SHARED_RETIRE_GRACE_S, BodyVault, KeyRing, copy_key_dir, shred_entries
from .seed import SeedTally, SeedVectors, write_seed
from .stats import ScopeStats, scope_stats
from .sweeper import DEFAULT_PURGE, PurgeSchedule, Sweeper

Operation = Callable[[Dependencies, CallContext, Any], dict[str, Any]]

#: The operation that runs each tool of `models.tools.TOOLS`, by its spec's name; what to
#: do around it (scan kept arguments, gate) the spec says.
OPERATIONS: dict[str, Operation] = {
    SEARCH: search.search,
    GET: reading.get,
    CAPTURE: capture.capture,
    REQUEST_ADMISSION: admission.request_admission,
    WITHDRAW: transitions.withdraw,
    FORGET: transitions.forget,
}
DB_FILE = "engram.db"
LOCK_NAME = "engram.lock"  # service.operator.ownership's lock file: a restore target may hold it
MODELS_DIR = "models"  # derived model files (the ONNX export); never backed up

logger = logging.getLogger("engram.engine")


class Engine:
    def __init__(
        self,
        deps: Dependencies,
        encoder: Encoder | None,
        *,
        writer_spec: ingestion.WriterSpec,
        serve_replica: bool = False,
        seed_vectors: Path | None = None,
    ) -> None:
        self.deps = deps
        self._encoder = encoder
        self._writer_spec = writer_spec
        self._ready = threading.Event()
        self._serve_replica = serve_replica and deps.replica is not None
        self._seed_vectors = seed_vectors
        self._warm_up_tally = SeedTally()
        self._recent_searches: RecentSearches | None = None  # kept only for an operator console

    @classmethod
    def open(
        cls,
        data_dir: Path,
        *,
        load_model: bool = True,
        encoder: Encoder | None = None,
        background: bool = False,
        database_url: str | None = None,
        database_timeout_ms: int = DEFAULT_DATABASE_TIMEOUT_MS,
        key_dir: Path | None = None,
        device: Device | str = Device.AUTO,
        serve_replica: bool = False,
        group: str = DEFAULT_GROUP,
        advertise_url: str | None = None,
        seed_vectors: Path | None = None,
        model_cache: Path | None = None,
        purge: PurgeSchedule = DEFAULT_PURGE,
    ) -> Engine:
        """Open (or create) the data directory, then load the model and let every
        projection catch up with the journal (in a thread when `background`).

        The store is SQLite in the data directory, or the PostgreSQL database at
        `database_url` that several replicas share (no wait on it longer than
        `database_timeout_ms`); the data directory then holds only this replica's
        projections. `key_dir` (default `<data_dir>/keys`) holds the KEK
        files: replicas of one database share it. ``device``: where the model's torch
        backend runs (queries go through ONNX Runtime on the CPU, exported into
        ``data_dir/models`` on first start). ``serve_replica`` (`engram serve` on a
        shared store): register this data directory as a replica that heartbeats,
        follows the journal and acknowledges purges; operator commands do not.
        ``seed_vectors``: a directory `engram admin export-vectors` wrote on a peer; the
        warm-up takes the vectors of records that match it instead of embedding them
        (see :mod:`.seed`). ``model_cache``: where the ONNX export is made once and
        shared (default: ``data_dir/models``).
        ``purge``: which forgets purge before they answer, and how
        long the background purge waits for more (see :mod:`.sweeper`)."""
        if encoder is None and load_model and Device(device) not in (Device.AUTO, Device.CPU):
            resolve_device(device)  # a named device this machine lacks fails here, before anything opens
        data_dir = Path(data_dir)
        claim_data_dir(data_dir)
        store = open_store(data_dir / DB_FILE, database_url, database_timeout_ms=database_timeout_ms)
        shared = store if isinstance(store, SharedStore) else None
        ring = KeyRing(
            Path(key_dir) if key_dir is not None else data_dir / "keys",
            retire_grace_s=SHARED_RETIRE_GRACE_S if shared is not None else 0.0,
        )
        vault = BodyVault(ring, store)
        # Before anything is projected or served: a forget the store predates (a database
        # restored from a backup) is applied again from the ledger beside the KEKs.
        transitions.reapply_shreds(store, ring.key_dir)
        if encoder is None and load_model:
            encoder = MiniLMEncoder(model_cache or data_dir / MODELS_DIR, device=device)
        ranker = Ranker(data_dir / "index", encoder)
        replica_id = replica_id_for(data_dir)
        routing = (
            routing_ops.Routing(shared, replica_id, group if serve_replica else None) if shared is not None else None
        )
        deps = Dependencies(
            data_dir=data_dir,
            store=store,
            vault=vault,
            ranker=ranker,
            projector=Projector(store, vault, ranker, projects=routing.projects if routing is not None else None),
            policies=Policies(data_dir),
            snapshots=SnapshotCache(shared),
            purge=purge,
            sweeper=Sweeper(purge.delay_s),
            replica=Replica(shared, replica_id, group, advertise_url) if shared is not None else None,
            routing=routing,
        )
        writer_spec = ingestion.WriterSpec(
            data_dir / DB_FILE, database_url, database_timeout_ms, ring.key_dir, ring.retire_grace_s
        )
        engine = cls(deps, encoder, writer_spec=writer_spec, serve_replica=serve_replica, seed_vectors=seed_vectors)
        if background:
            threading.Thread(target=engine._warm_up, name="engram-warm-up", daemon=True).start()
        else:
            engine._warm_up()
        return engine

    @property
    def encoder(self) -> Encoder | None:
        """The embedding model in use (None when opened lexical-only)."""
        return self._encoder

    @property
    def warm_up_tally(self) -> SeedTally:
        """How many records the warm-up took vectors for from the seed, and embedded."""
        return self._warm_up_tally

    @property
    def ranker(self) -> Ranker:
        """The ranking subsystem over this engine's projections (evaluation and benchmarks
        query it directly, below the contract's re-checks)."""
        return self.deps.ranker

    def _warm_up(self) -> None:
        load = getattr(self._encoder, "load", None)
        if load is not None:
            load()
        secret_detector()  # detect-secrets' plugins, which the first capture would import
        self.deps.ranker.warm_query_time()
        self._finish_rotation()  # one interrupted, or waiting out the shared grace
        if self.deps.routing is not None:
            self.deps.routing.release_unheld(self.deps)  # scopes moved away while it was down
        projector = self.deps.projector
        seed = (
            None if self._seed_vectors is None else SeedVectors.open(self._seed_vectors, self.deps.ranker.vector_space)
        )
        with projector.running("warm-up"), projector.seeding(seed) as tally:
            for scope in self.deps.store.scopes():
                projector.catch_up(scope)
                # What catching up replayed (the changes a crash cut off before their
                # checkpoint) is saved before ready: killed again before a checkpoint fell
                # due, a server would otherwise replay it at every start, a longer backlog
                # each time, and never become ready under repeated kills.
                self.deps.ranker.checkpoint(scope_key(scope))
                self.deps.ranker.warm(scope_key(scope))
            self.deps.ranker.settle()  # what catching up made due is saved before ready
        self._warm_up_tally = tally
        if self._seed_vectors is not None:
            logger.info("warm-up: %d records' vectors taken from the seed, %d embedded", tally.seeded, tally.embedded)
        self.sweep_invalidations()  # a replica that was down purges what it missed, first
        if self._serve_replica and self.deps.replica is not None:
            routing = self.deps.routing
            self.deps.replica.follow(
                self.deps.projector.catch_up if routing is None else lambda scope: routing.follow(self.deps, scope),
                self.sweep_invalidations,
                self._finish_rotation,
            )
        self._ready.set()

    def _finish_rotation(self) -> None:
        """Finish a rotation left pending (interrupted, or an older KEK waiting out the
        shared store's grace): rewrap what still uses an older KEK, then retire it."""
        ring = self.deps.vault.ring
        if ring.pending_rotation() and ring.retire_due():
            ring.finish_rotation(self.deps.store)

    # -- the agent path -------------------------------------------------------------------
    def execute(self, tool: str, ctx: CallContext, arguments: Any) -> dict[str, Any]:
        """Validate and run one tool call; every contract failure is a ContractError."""
        operation = OPERATIONS.get(tool)
        if operation is None or tool not in TOOLS:
            raise ContractError(ErrorCode.CAPABILITY_UNAVAILABLE)
        try:
            args = parse_arguments(tool, arguments)
        except ContractError as exc:  # the caller's envelope stays fixed; the operator learns where
            logger.info(
                "%s refused %s: %s",
                tool,
                exc.code.value,
                exc.detail,
                extra={"fields": {"tool": tool, "code": exc.code.value, "violations": exc.detail}},
            )
            raise
        if TOOLS[tool].mutation:
            # Every string a mutation keeps (payload, evidence, locators, reason refs) is
            # scanned; the idempotency key is kept only as a digest.
            refuse_secrets(args.model_dump(exclude_none=True, exclude={"idempotency_key"}))
        try:
            with self._serving(ctx.scope):
                value = operation(self.deps, ctx, args)
        except StoreUnavailable:
            raise ContractError(ErrorCode.STORE_UNAVAILABLE) from None
        except CommitUncertain:
            raise ContractError(ErrorCode.MUTATION_OUTCOME_UNKNOWN) from None
        if tool == SEARCH and self._recent_searches is not None:
            self._recent_searches.remember(ctx.scope, args.model_dump(exclude_none=True), value["rank_receipt"])
        return value

    def _serving(self, scope: Scope) -> contextlib.AbstractContextManager[None]:
        """A serving replica answers only the scopes routed to its group."""
        routing = self.deps.routing
        if routing is None or not self._serve_replica:
            return contextlib.nullcontext()
        return routing.serving(scope)

    def route_destination(self, scope: Scope) -> list[str] | None:
        """Where a call in the scope is answered: None here, else the URLs of the live
        replicas of the group it is routed to (see :meth:`.routing.Routing.destination`)."""
        routing = self.deps.routing
        if routing is None or not self._serve_replica:
            return None
        return routing.destination(scope)

    @property
    def routed(self) -> bool:
        """Whether this engine serves a replica group's scopes (calls of other groups'
        scopes are forwarded; see :mod:`service.http.router`)."""
        return self.deps.routing is not None and self._serve_replica

    @property
    def replica_id(self) -> str | None:
        """This replica's id on a shared store (None on SQLite)."""
        return self.deps.replica.replica_id if self.deps.replica is not None else None

    def wait_ready(self, timeout: float | None = None) -> bool:
        """Block until warm-up is done (True), or until ``timeout`` seconds passed (False)."""
        return self._ready.wait(timeout)

    def tenant_enabled(self, tenant: str) -> bool:
        return self.deps.store.tenant_enabled(tenant)

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

    def readiness(self) -> dict[str, Any]:
        """Ready once warm-up is done. Without a configured model the service is
        lexical-only by the operator's choice, which is ready; a configured model that
        failed is not."""
        reasons = []
        projector = self.deps.projector
        if not self._ready.is_set() or projector.long_projection is not None:
            behind = projector.behind()
            what = projector.long_projection or "model loading"
            if behind:
                scopes = ", ".join(f"{t}/{w} ({lag} events behind)" for (t, w), lag in behind)
                reasons.append(f"projections catching up ({what}): {scopes}")
            else:
                reasons.append(f"{what} in progress")
        elif self._encoder is not None and self.deps.ranker.semantic_health() is not None:
            reasons.append("semantic channel unavailable")
        return {"ready": not reasons, "reasons": reasons}

    def scope_stats(self, only: Scope | None = None) -> list[ScopeStats]:
        """Per scope (or for ``only``): candidates and records by state, projection lag
        by channel."""
        return scope_stats(self.deps, only)

    def store_connectivity(self) -> ConnectivityState | None:
        """The shared database server as the store's connections see it (None: the
        embedded store)."""
        state = getattr(self.deps.store, "connectivity_state", None)
        return state() if callable(state) else None

    def set_channel_latency_observer(self, observe: Callable[[str, float], None] | None) -> None:
        """`observe(channel, seconds)` after each ranking stage (lexical, semantic, fusion)."""
        self.deps.ranker.observe_latency = observe

    # -- the operator surface (never reachable through MCP) ----------------------------------
    def batch_writer(self) -> ingestion.BatchWriter:
        """Batch admission, steps two and three, on this engine's store: ``prepare`` (which
        examined records the scope has already) and ``commit`` (one transaction). Step
        one, :func:`examine` (secret scan, digests), needs no engine (see
        :mod:`service.engine.ingestion`)."""
        return ingestion.BatchWriter(self.deps.store, self.deps.vault)

    def writer_spec(self) -> ingestion.WriterSpec:
        """Where a worker process opens a :class:`~.ingestion.BatchWriter` of its own on
        this engine's store and KEKs (:meth:`~.ingestion.BatchWriter.open`)."""
        return self._writer_spec

    def embed_batch(self, batch: ingestion.CommittedBatch) -> list[np.ndarray] | None:
        """Passage vectors for a committed batch's records, as their admission would
        compute them; None when the semantic channel cannot embed (the batch is then
        projected lexically and the semantic channel reports itself behind)."""
        try:
            return self.deps.ranker.embed(batch.documents)
        except SemanticUnavailable:
            return None

    @contextlib.contextmanager
    def bulk_load(self, scope: Scope) -> Iterator[ingestion.BulkLoad]:
        """Batch admission, step four: the scope held for a load (no catch-up of it
        interleaves), whose ``index`` projects committed batches into both indexes, in
        commit order (a batch may be committed, by :meth:`batch_writer` or by a writer in
        another process, while the one before it is indexed)."""
        with self.deps.projector.exclusive(scope):
            yield ingestion.BulkLoad(self.deps, scope)

    def catch_up(self, scope: Scope) -> None:
        """Bring the scope's indexes up to its journal (heals an interrupted load)."""
        self.deps.projector.catch_up(scope)

    def refresh_statistics(self) -> None:
        """After a bulk load: the store's query planner statistics brought up to date."""
        self.deps.store.refresh_statistics()

    def scope_cursor(self, scope: Scope) -> int:
        """The scope's journal head."""
        return self.deps.store.scope_cursor(scope)

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
        return operator.transition(self.deps, scope, record_id, operation, reason_ref)

    def adjudicate(self, scope: Scope, candidate_id: str, decision: str, reason_ref: str) -> dict[str, Any]:
        """Accept or reject a candidate held as pending_adjudication."""
        return admission.adjudicate(self.deps, scope, candidate_id, decision, reason_ref)  # type: ignore[arg-type]

    def expire_due(self) -> list[tuple[Scope, str]]:
        return operator.expire_due(self.deps)

    def keep_recent_searches(self) -> None:
        """From now on, keep the last searches (their receipts, and the arguments a replay
        needs, query included) in memory for an operator console to pick; a server
        without a console keeps none."""
        if self._recent_searches is None:
            self._recent_searches = RecentSearches()

    def recent_search(self, receipt_digest: str) -> RecentSearch | None:
        """A search this process answered lately, by its rank receipt's digest (the one
        its audit line names), with what a replay needs; None once it is no longer kept,
        or when no search is kept (`keep_recent_searches`)."""
        return self._recent_searches.get(receipt_digest) if self._recent_searches is not None else None

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

    @classmethod
    def restore(cls, backup: Path, data_dir: Path, *, key_source: Path | None = None, **open_kwargs: Any) -> Engine:
        """Restore a backup into a new data dir: keys from the backup and/or `key_source`
        (the live keys, or an export), the shred ledger applied (nothing forgotten after
        the backup comes back), every journal chain verified, projections caught up."""
        backup, data_dir = Path(backup), Path(data_dir)
        if data_dir.exists() and (held := sorted(p.name for p in data_dir.iterdir() if p.name != LOCK_NAME)):
            raise ContractError(
                ErrorCode.RESTORE_REFUSED,
                f"{data_dir} is not empty (it holds {', '.join(held[:5])}{', ...' if len(held) > 5 else ''}); "
                "restore into a new directory, or remove what is in it",
            )
        has_keys = (backup / "keys").is_dir() or (key_source is not None and Path(key_source).is_dir())
        if not (backup / DB_FILE).exists():
            raise ContractError(ErrorCode.BACKUP_INVALID, f"{backup} holds no {DB_FILE}: not a backup")
        if not has_keys:
            given = f"{key_source} is not a directory" if key_source is not None else "no --keys given"
            raise ContractError(ErrorCode.BACKUP_INVALID, f"the backup holds no key-encryption keys and {given}")
        try:
            return cls._restore_into(backup, data_dir, key_source, open_kwargs)
        except BaseException:
            for path in data_dir.iterdir():  # a failed restore leaves the directory as it found it
                if path.name == LOCK_NAME:
                    continue
                if path.is_dir() and not path.is_symlink():
                    shutil.rmtree(path)
                else:
                    path.unlink()
            raise

    @classmethod
    def _restore_into(cls, backup: Path, data_dir: Path, key_source: Path | None, open_kwargs: Any) -> Engine:
        shutil.copytree(backup, data_dir, dirs_exist_ok=True)
        keys = data_dir / "keys"
        if key_source is not None:
            copy_key_dir(Path(key_source), keys)
        store = open_store(data_dir / DB_FILE, None)
        try:
            known = {p.stem for p in keys.glob("kek-*.key")}
            missing = sorted({kek for _, _, kek in store.all_wrapped_keys()} - known)
            if missing:
                raise ContractError(
                    ErrorCode.BACKUP_INVALID,
                    f"the backup's data keys are wrapped under {', '.join(missing)}, which the keys given lack "
                    "(a rotation retired it after the backup?); pass --keys of an `engram admin export-kek` "
                    "copy made while it was current, or a backup made with --include-keys",
                )
            transitions.apply_shreds(store, shred_entries(keys), keys)
        finally:
            store.close()
        engine = cls.open(data_dir, **open_kwargs)
        broken = [s for s in engine.deps.store.scopes() if not engine.deps.store.verify_chain(s)]
        if broken:
            engine.close()
            raise ContractError(ErrorCode.BACKUP_INVALID, f"the journal chain of {len(broken)} scope(s) is broken")
        return engine

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
            shared = self.deps.replica.store
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
        return routing_ops.routes(self.deps.replica.store)

    def move_scope(
        self, scope: Scope, group: str, *, project_wait_s: float = 300.0, release_wait_s: float = 30.0
    ) -> routing_ops.MoveOutcome:
        """Move a scope to another replica group (operator surface; see
        :func:`.routing.move`). Raises routing.NoLiveReplica when the group has none."""
        if self.deps.replica is None:
            raise ContractError(ErrorCode.CAPABILITY_UNAVAILABLE)
        return routing_ops.move(
            self.deps.replica.store, scope, group, project_wait_s=project_wait_s, release_wait_s=release_wait_s
        )

    def retire_replica(self, replica_id: str) -> bool:
        """Remove a replica gone for good, so the purges it owed stop being pending. A
        replica retired by mistake re-registers when it next starts; its indexes may
        then hold purged records: rebuild its projections before it serves."""
        if self.deps.replica is None:
            raise ContractError(ErrorCode.CAPABILITY_UNAVAILABLE)
        return self.deps.replica.store.retire_replica(replica_id)

    def close(self) -> None:
        if self.deps.replica is not None:
            self.deps.replica.stop()
        self.deps.sweeper.stop()
        self.deps.snapshots.close()
        self.deps.ranker.close()
        self.deps.store.close()


def export_keys(key_dir: Path, dest: Path) -> Path:
    """Copy the KEK files and the shred ledger into a new directory (0700)."""
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=False, mode=0o700)
    copy_key_dir(Path(key_dir), dest)
    return dest
