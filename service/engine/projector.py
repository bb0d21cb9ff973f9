"""The projector keeps the ranking indexes a projection of the journal.

It reads the scope's journal past the lowest projection cursor, collects the records
those events touched, and re-derives each one from the store: an accepted_current
record is (re)indexed from its sealed body, anything else is removed. Re-deriving from
current state rather than replaying effects makes catch-up idempotent and order-proof,
so a crash between an index commit and its cursor write only repeats harmless work.

While :meth:`Projector.seeding` runs (a new replica's warm-up), passage vectors a peer
exported are taken from the seed for records that match it, and only the rest are
embedded (see :mod:`.seed`).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from engram.models.scope import Scope
from engram.ranking import IndexDocument, Ranker
from engram.ranking.read_write_lock import ReadWriteLock
from engram.service.store.base import Store

from .lifecycle import RecordState
from .records import index_document, record_aad, scope_key
from .sealing import BodyVault, SealBroken
from .seed import SeedTally, SeedVectors

RANKING_EVENTS = frozenset(
    # record_ingested: what bulk loads journaled before they shared admission's writer.
    {"record_accepted", "record_ingested", "record_tombstoned", "record_state_changed"}
)
#: The ranking events that can make a record current (a state change can return one).
ACCEPTING_EVENTS = RANKING_EVENTS - {"record_tombstoned"}
BATCH = 512
#: Records per batch while a seed supplies the vectors: nothing waits on an encoder, so
#: larger batches spend less on the lexical channel's per-batch commit (measured: 20,000
#: records seeded in batches of 512 spent 5.3 of 36 s committing Tantivy).
SEEDED_BATCH = 4096

Progress = Callable[[int], None]


@dataclass(frozen=True)
class ProjectionView:
    """A scope's journal head and each channel's applied cursor, read once together
    (a search judges lag, picks its profile and writes its receipt from one reading)."""

    head: int
    cursors: dict[str, int]

    @property
    def lags(self) -> dict[str, int]:
        """Journal events each channel has not applied yet."""
        return {ch: self.head - c for ch, c in self.cursors.items()}


class Projector:
    def __init__(
        self,
        store: Store,
        vault: BodyVault,
        ranker: Ranker,
        *,
        projects: Callable[[Scope], bool] | None = None,
    ) -> None:
        self.store = store
        self.vault = vault
        self.ranker = ranker
        # Which scopes this process keeps indexes of (replica groups: its group's); None: all.
        self.projects = projects
        # One lock per scope: a scope's catch-up (an admission's, a search's, bulk
        # ingestion's batch) waits only for its own scope's, never another scope's.
        # Held shared under ``_all``, which a projection of everything (a backup's copy,
        # a rebuild's reset) takes alone. Order: ``_all``, then a scope's lock.
        self._all = ReadWriteLock()
        self._scope_locks: dict[Scope, threading.Lock] = {}
        self._scope_locks_guard = threading.Lock()
        self._long: str | None = None  # the long projection running now, if any
        self._seed: tuple[SeedVectors | None, SeedTally] | None = None  # while seeding

    @property
    def long_projection(self) -> str | None:
        """ "warm-up" or "rebuild" while one runs (readiness reports it), else None."""
        return self._long

    @contextmanager
    def running(self, name: str) -> Iterator[None]:
        """Mark a long projection (warm-up, rebuild) for readiness while it runs."""
        self._long = name
        try:
            yield
        finally:
            self._long = None

    @contextmanager
    def seeding(self, seed: SeedVectors | None) -> Iterator[SeedTally]:
        """While the block runs, take passage vectors from ``seed`` (when there is one)
        for the records it holds; yields the tally of documents seeded and embedded."""
        tally = SeedTally()
        self._seed = (seed, tally)
        try:
            yield tally
        finally:
            self._seed = None

    def behind(self, limit: int = 10) -> list[tuple[Scope, int]]:
        """Up to `limit` scopes whose lexical channel trails the journal, with the lag."""
        out = []
        for scope in self.store.scopes():
            lag = self.lag(scope).get("lexical", 0)
            if lag > 0:
                out.append((scope, lag))
                if len(out) >= limit:
                    break
        return out

    def view(self, scope: Scope) -> ProjectionView:
        """The scope's journal head and channel cursors, as of now."""
        return ProjectionView(self.store.scope_cursor(scope), self.ranker.projection_cursor(scope_key(scope)))

    def accepts_pending(self, scope: Scope, after: int, through: int) -> bool:
        """Whether the scope's journal events after cursor `after`, through `through`,
        may make a record current (an index that has not applied them may lack it).
        Removals need no index: search re-checks every candidate against the store."""
        for event in self.store.events(scope, after=after):
            if event.cursor > through:
                return False
            if event.kind in ACCEPTING_EVENTS:
                return True
        return False

    def lag(self, scope: Scope) -> dict[str, int]:
        """Journal events each channel has not applied yet."""
        return self.view(scope).lags

    @contextmanager
    def exclusive(self, scope: Scope | None = None) -> Iterator[None]:
        """Hold off catch-up of ``scope`` (every scope when None) while a caller commits
        and applies a batch itself (bulk ingestion), or copies the projections (backup),
        so the two never interleave."""
        if scope is None:
            with self._all.write():
                yield
            return
        with self._all.read(), self._scope_lock(scope):
            yield

    def try_catch_up(self, scope: Scope, wait_s: float = 0.0) -> tuple[bool, ProjectionView]:
        """Catch up unless another projection of this scope (an admission's catch-up,
        an ingest batch) or of every scope (backup, rebuild's reset) holds it for more
        than `wait_s`: a search must not queue behind it. Returns whether it caught up,
        and the scope's view (after the catch-up when there was one); when not, the
        caller judges the lag (search answers PROJECTION_STALE rather than an empty
        list from an index that is behind)."""
        view = self.view(scope)
        if max(view.lags.values()) <= 0:
            # Nothing to apply: answer without any lock.
            return True, view
        deadline = time.monotonic() + wait_s
        with self._all.read(timeout=wait_s) as shared:
            if not shared:
                return False, view
            lock = self._scope_lock(scope)
            if not lock.acquire(timeout=max(0.0, deadline - time.monotonic())):
                return False, view
            try:
                self._catch_up_locked(scope)
            finally:
                lock.release()
        return True, self.view(scope)

    def catch_up(self, scope: Scope, progress: Progress | None = None) -> None:
        """Apply the journal past the lowest channel cursor, in batches of touched records.

        Each batch is labelled with the cursor of its last event, so a channel that
        already stands at or past it skips the batch (no re-embedding after a lexical-
        only rebuild), and a crash between batches resumes at the last applied one."""
        with self._all.read(), self._scope_lock(scope):
            self._catch_up_locked(scope, progress)

    def _scope_lock(self, scope: Scope) -> threading.Lock:
        with self._scope_locks_guard:
            return self._scope_locks.setdefault(scope, threading.Lock())

    def _catch_up_locked(self, scope: Scope, progress: Progress | None = None) -> None:
        """:meth:`catch_up`'s work (caller holds ``_all`` shared and the scope's lock)."""
        key = scope_key(scope)
        after = min(self.ranker.projection_cursor(key).values())
        head = self.store.scope_cursor(scope)
        if after >= head or (self.projects is not None and not self.projects(scope)):
            return
        batch: dict[str, None] = {}
        seeding = self._seed
        limit = SEEDED_BATCH if seeding is not None and seeding[0] is not None else BATCH
        for event in self.store.events(scope, after=after):
            if event.cursor > head:
                break
            if event.kind in RANKING_EVENTS:
                batch[event.subject] = None
            if len(batch) >= limit:
                self._apply(scope, key, list(batch), event.cursor, after)
                if progress is not None:
                    progress(len(batch))
                after, batch = event.cursor, {}
        self._apply(scope, key, list(batch), head, after)
        if progress is not None and batch:
            progress(len(batch))

    def _apply(self, scope: Scope, key: str, record_ids: list[str], through: int, after: int) -> None:
        rows = self.store.records(scope, record_ids)
        upserts: list[IndexDocument] = []
        removals: list[str] = []
        for rid in record_ids:
            row = rows.get(rid)
            if row is None or row.state != RecordState.ACCEPTED_CURRENT:
                removals.append(rid)
                continue
            try:
                body = self.vault.open_json(row.key_id, row.sealed, record_aad(scope, rid), wrapped=row.wrapped_key)
            except SealBroken:
                removals.append(rid)
                continue
            upserts.append(index_document(key, rid, body["payload"]))
        seeding = self._seed
        if seeding is None:
            self.ranker.apply(key, upserts=upserts, removals=removals, through_cursor=through, after_cursor=after)
            return
        seed, tally = seeding
        vectors = None if seed is None else seed.vectors_for(key, upserts)
        applied = self.ranker.apply(
            key,
            upserts=upserts,
            removals=removals,
            through_cursor=through,
            after_cursor=after,
            vectors=vectors if vectors and any(v is not None for v in vectors) else None,
        )
        tally.add(applied.supplied, applied.embedded)

    def rebuild(self, progress: Progress | None = None) -> None:
        """Drop every index and replay all scopes' journals into fresh ones."""
        with self.running("rebuild"):
            with self._all.write():
                self.ranker.reset()
            for scope in self.store.scopes():
                self.catch_up(scope, progress)
