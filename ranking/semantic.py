"""The semantic channel: one usearch HNSW index per scope over passage vectors.

Why per scope: an approximate nearest-neighbour search cannot be filtered cheaply (a
Python filter callback holds the GIL), and a shared graph would let one tenant's
vectors crowd another's out of the top k. Per-scope files also make a purge a rebuild of
one small index.

A scope's vectors are held twice, in two forms (``SemanticConfig.walk`` and ``storage``):
in memory, the usearch graph holds each passage as a compact code (int8, one byte per
dimension, scaled so a unit vector's components span the byte's range: 384 bytes for
MiniLM's 384 dimensions against 768 for float16), which is all a walk needs to find
candidates; on disk, :mod:`ranking.vector_rows` keeps the exact rows (float16), from
which the candidates are scored exactly (``SemanticConfig.rescore_for``: at least
twice as many as asked for), and which every other exact read uses: similarities of
lexical-only candidates, purges, rebuilds and exports.
Why this form and these parameters (and not one sign bit per dimension, which at a
million vectors lost most of the true neighbours among near-ties): measured in
``docs/results/`` (``engram bench``).

A scope of at most ``SemanticConfig.exact_up_to`` live passages (most agents' memories)
is not walked but scanned: usearch's exact search scores every code in memory, and the
best codes' rows are rescored exactly, as a walk's candidates are. Only the codes'
rounding then stands between the scan and the true nearest neighbours, where a walk
also misses neighbours the graph does not lead to; a scope of at most
``rescore_for(k)`` passages rescores every row, so its answer is exact. A graph that
reaches fewer vectors than asked for (after many deletions) is scanned, every row
rescored.

usearch holds the GIL while it searches, so concurrent searches of one scope would take
turns on one core: they share one multi-threaded graph search (or scan) instead, batched
as query encodes are (:mod:`ranking.batching`); a lone search is one plain call.

Records are embedded as passages (see :mod:`ranking.documents`): up to four overlapping
180-word windows of primary + decision + evidence + context, and a record scores by its
best passage, so text past the model's 256-token window stays searchable: a record's
later text (decisions, evidence) would otherwise be invisible to this channel (passages
against head-only vectors, measured: ``docs/results/``).

Files per scope (``root/<sha256(scope)[:32]>/``): ``vectors-<generation>.bin`` (the
usearch graph of codes), ``rows-<generation>.f16`` (the exact rows, see
:mod:`ranking.vector_rows`), ``meta.json`` (scope key, generation, sha256 of the graph
file, the rows file's generation, row count and block checksums, the graph's build
parameters, label map, valid times; written and streamed back by :mod:`ranking.scope_meta`)
and ``cursor.json``. A save makes the rows durable, writes a new graph generation, then
swaps ``meta.json`` atomically, then deletes older generations, then writes
``cursor.json``, so a crash leaves the previous consistent state (rows appended past the
saved count are cut off when the scope opens) and the cursor on disk never claims more
than the saved files hold. The checksums are verified before the native loader ever
reads the graph, so a damaged file is reported as ``index corrupt`` instead of crashing
the process.

Rebuild on open: a scope whose saved index was built with other graph parameters than
the profile's (``SemanticConfig.graph``), or saved by a release that used hnswlib (its
meta.json has no ``graph``) or kept its vectors in the graph itself (no ``rows``), is
rebuilt from its stored vectors and saved as a new generation when it opens (the engine
opens every scope at warm-up, before ready).

Deferred saving: a save rewrites the graph and the label map, so saving on every apply
made bulk loading quadratic and made each admission pay a full save. ``apply`` therefore
changes only the in-memory graph, the in-memory cursor (what search and
:meth:`SemanticIndex.cursor` read) and appends rows, not yet durable; a *checkpoint*
makes it durable once
``checkpoint_records`` records were applied or ``checkpoint_seconds`` passed since the
scope's last save or load (checked on apply, and spaced by :data:`CHECKPOINT_SPACING`; a
scope never saved is due at once), on :meth:`SemanticIndex.checkpoint` and
:meth:`SemanticIndex.close`, and always before :meth:`SemanticIndex.purge` returns (a
purge must reach the disk). After a crash the scope reopens at its last checkpoint, with
that checkpoint's cursor, and the engine's projector re-applies the journal from there
(re-deriving from current state, so the repeat is harmless). An apply that only moves
the cursor of a scope with nothing unsaved writes the cursor at once.

A due checkpoint is taken in the background (:mod:`ranking.checkpointer`), not by the
apply that made it due: that apply returns at once, and the save holds the scope's
lock only to save the graph to a temporary file, copy the label map and make the rows
durable, writes the rest of the new generation (the graph file made durable and
hashed, ``meta.json`` with the label map) beside the scope's searches and changes, and
takes the lock again only to rename its ``meta.json`` into place; the disk then holds
the scope as it was at the first step, and changes made since are the next
checkpoint's. A purge writes its rebuilt generation the same way. Other saves (an
explicit checkpoint, close, a rebuild at open) write under the lock: a change waits on
``_ScopeVectors.changing`` for them, without holding searches off meanwhile.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple, cast

import numpy as np

from engram.models.device import usable_cores
from engram.models.errors import EngramError
from engram.ranking.batching import NaturalBatcher
from engram.ranking.checkpointer import Checkpointer
from engram.ranking.hnswlib_file import HnswlibVectors
from engram.ranking.native import usearch_index
from engram.ranking.passage_labels import PassageLabels
from engram.ranking.profiles import SemanticConfig, VectorStorage
from engram.ranking.read_write_lock import ReadWriteLock
from engram.ranking.scope_meta import read_meta, write_meta
from engram.ranking.storage import atomic_write, atomic_write_json, prepared_write, read_json
from engram.ranking.vector_rows import VectorRows


class CorruptIndex(EngramError):
    """A scope's vector files are missing, truncated or do not match their checksum."""


class SemanticUnavailable(EngramError):
    """The semantic channel cannot serve this request (reason in the message)."""


if TYPE_CHECKING:  # loaded through usearch_index(), after the C++ runtime
    from usearch.index import Index, Matches

#: The shipped hybrid profile's graph (``HYBRID_PROFILE.config.semantic``, tested equal).
DEFAULT_GRAPH = SemanticConfig()
# Checkpoint defaults: at most this many applied records (about a second of embedding at
# most, since each costs a model call, and within the engine's semantic lag bound of
# 1000 journal events) or this many seconds of applies are lost to a crash and re-applied.
CHECKPOINT_RECORDS = 1000
CHECKPOINT_SECONDS = 30.0
# A due checkpoint also waits until this many times its scope's last save duration has
# passed since that save, so saving costs at most about a tenth of apply time however
# large the scope grows (bulk loading stays linear; the window grows with save cost).
CHECKPOINT_SPACING = 9.0
# usearch holds the GIL while it writes an index (about a second at a million vectors);
# a save gives it back to the process's other threads at least this often (seconds).
SAVE_YIELD_S = 0.005
# Vectors are read back from an index of an earlier release this many at a time
# (``Index.get`` makes one array per key), so a rebuild never holds them all twice.
LOAD_CHUNK = 16_384
# Concurrent graph searches of one scope run as one batch of at most this many queries,
# on up to this many of usearch's threads (it holds the GIL while it searches, so
# threads of our own would take turns; see ranking.batching).
GRAPH_BATCH = 16
GRAPH_THREADS = usable_cores()


class SemanticHit(NamedTuple):
    """One semantic candidate (a record's best passage). A named tuple: a search builds
    up to 200 of them."""

    record_id: str
    similarity: float
    valid_time_ms: int


class _Found(NamedTuple):
    """A search's passages, best first: labels and their exact inner products."""

    labels: np.ndarray
    similarities: np.ndarray


@dataclass
class _ScopeVectors:
    """One scope's in-memory graph, its rows on disk, and the maps the graph does not
    keep for us."""

    index: Index  # the graph: keys are passage labels, vectors their compact codes
    rows: VectorRows | None = None  # the exact rows (None until the scope has a vector)
    rows_generation: int = 0  # the generation of ``rows``' file
    generation: int = 0
    labels: PassageLabels = field(default_factory=PassageLabels)  # label <-> record, valid times
    cursor: int = 0  # in memory: what this process has applied
    saved_cursor: int = 0  # what cursor.json says (never beyond the saved files)
    unsaved: int = 0  # records changed since the last save
    saved_at: float = float("-inf")  # time.monotonic() of the last save; never: -inf
    save_seconds: float = 0.0  # how long the last save took
    saves: int = 0  # generations swapped in on disk since the scope loaded
    # The names of the files each generation being written beside the scope's changes
    # (a purge's, a background save's) will have: no save deletes them, or their
    # temporary files, meanwhile; a background save is not begun beside another.
    building: list[frozenset[str]] = field(default_factory=list)
    # Searches and a background save share it; applies and purges hold it alone, after
    # taking ``changing``.
    lock: ReadWriteLock = field(default_factory=ReadWriteLock)
    # Held by every change to the scope and by its save, before ``lock``: a change waits
    # here for a background save to end, so it never waits as a writer (which would
    # hold new searches off) for as long as a save takes.
    changing: threading.Lock = field(default_factory=threading.Lock)
    # Concurrent searches (each under ``lock`` shared) run their graph queries together.
    searches: NaturalBatcher[_GraphSearch, _Found] = field(
        default_factory=lambda: NaturalBatcher(_graph_searches, max_batch=GRAPH_BATCH)
    )

    @property
    def live_count(self) -> int:
        return self.labels.live_count

    def read(self, labels: Sequence[int] | np.ndarray) -> np.ndarray:
        """The exact rows of ``labels`` (all live) as float32, in order."""
        if self.rows is None:
            if len(labels):
                raise KeyError(labels[0])
            return np.zeros((0, self.index.ndim), np.float32)
        return self.rows.read(labels)


class _GraphSearch(NamedTuple):
    """One caller's query of a scope: a float32 vector, how many passages, how many
    candidates to rescore, and the graph's search depth (ef), or ``exact`` to score every
    code instead of walking."""

    scope: _ScopeVectors
    vector: np.ndarray
    k: int
    walk: int = 0  # candidates handed to rescoring
    ef: int = 0
    exact: bool = False


def _graph_searches(requests: Sequence[_GraphSearch]) -> list[_Found]:
    """Each request's passages: alone, one plain search; together, one multi-threaded
    search per scope, depth and kind (the same passages each query gets alone). usearch
    keeps one search depth per index, not per query, so each group of walks sets its
    own before it walks; a scope's batches run one at a time (:mod:`ranking.batching`)."""
    groups: dict[tuple[int, int, int, int, bool], list[int]] = {}
    for i, request in enumerate(requests):
        groups.setdefault((id(request.scope), request.k, request.walk, request.ef, request.exact), []).append(i)
    found: dict[int, _Found] = {}
    for rows in groups.values():
        scope, _, k, walk, ef, exact = requests[rows[0]]
        queries = np.stack([requests[i].vector for i in rows])
        found.update(zip(rows, _search(scope, queries, k, walk, ef, exact)))
    return [found[i] for i in range(len(requests))]


def _search(scope: _ScopeVectors, queries: np.ndarray, k: int, walk: int, ef: int, exact: bool) -> list[_Found]:
    """Each query's ``walk`` candidates from the graph's codes, rescored exactly from the
    rows: the best ``k``. The candidates are those of the best code scores, found by a
    walk at depth ``ef`` or, when ``exact``, by scoring every code (usearch's exact
    search, in memory: the graph holds live passages only)."""
    index = scope.index
    if walk == 0:
        return [_Found(np.zeros(0, np.uint64), np.zeros(0, np.float32)) for _ in queries]
    if not exact and index.expansion_search != ef:
        index.expansion_search = ef  # type: ignore[misc]  # settable; the stub says read-only
    codes = _codes(queries, index)
    if len(queries) == 1:
        candidates = [cast("Matches", index.search(codes[0], walk, exact=exact, threads=1)).keys]
    else:
        batch = index.search(codes, walk, exact=exact, threads=min(len(queries), GRAPH_THREADS))
        candidates = [cast("Matches", batch[j]).keys for j in range(len(queries))]
    out = []
    for query, keys in zip(queries, candidates):
        labels = np.sort(keys)  # in file order: consecutive rows are read at once
        scores = scope.read(labels) @ query
        best = np.argsort(-scores, kind="stable")[:k]  # equal scores: the lower label first
        out.append(_Found(labels[best], scores[best]))
    return out


def _codes(rows: np.ndarray, index: Index) -> np.ndarray:
    """What the graph holds of each row: for an int8 graph, the row scaled so that a
    unit vector's components (about 1 / sqrt(dim) each) span the byte's range (five
    times that maps to 127; a larger component is clipped: rescoring reads the exact
    row), else the rows themselves (usearch converts them to its type)."""
    rows = np.atleast_2d(np.asarray(rows, dtype=np.float32))
    if index.dtype != usearch_index().ScalarKind.I8:
        return rows
    scale = 127.0 * np.sqrt(rows.shape[1]) / 5.0
    return np.clip(np.rint(rows * scale), -127, 127).astype(np.int8)


# The exact rows' numpy type for each storage the profile may name.
_ROW_TYPES: dict[VectorStorage, np.dtype] = {
    VectorStorage.F16: np.dtype(np.float16),
    VectorStorage.F32: np.dtype(np.float32),
}


def _new_index(dim: int, graph: SemanticConfig) -> Index:
    return usearch_index().Index(
        ndim=dim,
        metric="ip",
        dtype=graph.walk.value,
        connectivity=graph.connectivity,
        expansion_add=graph.expansion_add,
        expansion_search=graph.expansion_search,
        multi=False,
    )


#: The threads usearch adds vectors with (0: one per core), or a function that says.
GraphThreads = int | Callable[[], int]

#: Rows one usearch call adds: a batch is added in slices, each with its thread count
#: asked anew, so that a core freed mid-batch (a bulk load's writer done) joins in
#: within a slice, not after the batch (4,096 rows on one thread: a second or more).
ADD_SLICE = 1024


def _keys(labels: Sequence[int] | np.ndarray) -> np.ndarray:
    return np.asarray(labels, dtype=np.uint64)


def _index_rows(index: Index, labels: Sequence[int] | np.ndarray) -> np.ndarray:
    """The vectors an earlier release's index stored for ``labels`` (all present), as
    float32 rows, in order."""
    if not len(labels):
        return np.zeros((0, index.ndim), np.float32)
    found = cast(np.ndarray, index.get(_keys(labels)))  # every label is present
    return np.concatenate(found).reshape(len(labels), index.ndim).astype(np.float32, copy=False)


def _yielding_progress() -> Callable[[int, int], bool]:
    """A progress callback for usearch's save that lets other threads run: usearch holds
    the GIL while it writes and calls this back for every element it writes, so every
    ``SAVE_YIELD_S`` the callback sleeps for no time, which hands the GIL over."""
    last = time.monotonic()

    def progress(done: int, total: int) -> bool:
        nonlocal last
        now = time.monotonic()
        if now - last >= SAVE_YIELD_S:
            time.sleep(0)
            last = time.monotonic()
        return True

    # usearch checks a callback's annotations against the types themselves, not the
    # strings this module's postponed annotations leave in them.
    progress.__annotations__ = {"done": int, "total": int, "return": bool}
    return progress


def _sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


class SemanticIndex:
    """All scopes' vector indexes under ``root``, loaded lazily and cached."""

    def __init__(
        self,
        root: Path,
        dim: int,
        *,
        graph: SemanticConfig = DEFAULT_GRAPH,
        checkpoint_records: int = CHECKPOINT_RECORDS,
        checkpoint_seconds: float = CHECKPOINT_SECONDS,
        checkpoint_spacing: float = CHECKPOINT_SPACING,
    ) -> None:
        self._root = root
        self._dim = dim
        self._graph = graph
        self._checkpoint_records = max(1, int(checkpoint_records))
        self._checkpoint_seconds = float(checkpoint_seconds)
        self._spacing = float(checkpoint_spacing)
        root.mkdir(parents=True, exist_ok=True)
        self._scopes: dict[str, _ScopeVectors] = {}
        self._scopes_lock = threading.Lock()  # guards the three fields below
        self._loading: dict[str, threading.Lock] = {}  # one per scope, held while it loads
        self._epoch = 0  # bumped by reset: a load that began before it is not kept
        self._checkpointer = Checkpointer(self._background_save)
        self._saving = threading.Lock()  # held by a background save; reset waits on it

    # -- projection -------------------------------------------------------------------

    def cursor(self, scope_key: str) -> int:
        """The scope's applied cursor (in memory once loaded), readable even when its
        vector file is damaged (then the one on disk)."""
        with self._scopes_lock:
            state = self._scopes.get(scope_key)
        if state is not None:
            return state.cursor
        return self._disk_cursor(scope_key)

    def _disk_cursor(self, scope_key: str) -> int:
        value = read_json(self._dir(scope_key) / "cursor.json")
        return int(value["cursor"]) if value else 0

    def apply(
        self,
        scope_key: str,
        *,
        upserts: Sequence[tuple[str, int, np.ndarray]],
        removals: Sequence[str],
        through_cursor: int,
        graph_threads: GraphThreads = 0,
    ) -> None:
        """Replace each upserted record's passages, hide removals, move the cursor; save
        when a checkpoint is due (see the module docstring).

        ``upserts`` holds (record_id, valid_time_ms, passage vectors as rows);
        ``graph_threads``: usearch's threads for adding them (0: one per core), or a
        function asked for them before each :data:`ADD_SLICE` rows.
        """
        state = self._scope(scope_key)
        with state.changing, state.lock.write():
            upserted = {r for r, _, _ in upserts}
            changed = len(upserted)
            for record_id in {*removals, *upserted}:
                if self._hide(state, record_id) and record_id not in upserted:
                    changed += 1
            rows = [np.atleast_2d(np.asarray(v, dtype=np.float32)) for _, _, v in upserts]
            if rows and state.index.size == 0 and state.index.ndim != rows[0].shape[1]:
                # An empty scope takes the dimension of the vectors it is given (bulk
                # ingestion of precomputed vectors runs without the model).
                state.index = _new_index(rows[0].shape[1], self._graph)
            rows = [r.reshape(-1, state.index.ndim) for r in rows]
            total = sum(len(r) for r in rows)
            if total:
                labels: list[int] = []
                for (record_id, valid_time, _), vectors in zip(upserts, rows):
                    labels.extend(state.labels.add(record_id, valid_time, len(vectors)))
                stacked = np.vstack(rows)
                self._rows_of(scope_key, state).write(labels[0], stacked)  # labels are one run
                keys, codes = _keys(labels), _codes(stacked, state.index)
                for start in range(0, total, ADD_SLICE):
                    threads = graph_threads() if callable(graph_threads) else graph_threads
                    end = start + ADD_SLICE
                    state.index.add(keys[start:end], codes[start:end], threads=threads)
            state.cursor = max(state.cursor, through_cursor)
            state.unsaved += changed
            if state.unsaved == 0:
                self._write_cursor(scope_key, state)  # nothing unsaved: the files hold it all
            else:
                elapsed = time.monotonic() - state.saved_at
                due = state.unsaved >= self._checkpoint_records or elapsed >= self._checkpoint_seconds
                if due and elapsed >= self._spacing * state.save_seconds and not self._checkpointer.request(scope_key):
                    self._save(scope_key, state)  # closed: no background saves any more

    def settle(self, timeout: float | None = None) -> bool:
        """Wait until no background checkpoint is due or running; False on timeout."""
        return self._checkpointer.settle(timeout)

    def checkpoint(self, scope_key: str | None = None) -> None:
        """Save every loaded scope (or just ``scope_key``) with unsaved changes."""
        with self._scopes_lock:
            states = (
                list(self._scopes.items())
                if scope_key is None
                else [(scope_key, self._scopes[scope_key])]
                if scope_key in self._scopes
                else []
            )
        for key, state in states:
            with state.changing, state.lock.write():
                if state.unsaved:
                    self._save(key, state)
                elif state.cursor > state.saved_cursor:
                    self._write_cursor(key, state)

    def close(self) -> None:
        """End background checkpoints, then checkpoint every scope (the in-memory indexes
        stay usable; later due checkpoints are taken by the apply itself)."""
        self._checkpointer.stop()
        self.checkpoint()

    def purge(self, scope_key: str, record_ids: Sequence[str]) -> bool:
        """Rebuild the scope's graph and rows from live vectors only and save them before
        returning, so hidden ones leave the disk.

        The scope stays searchable and writable meanwhile: the fresh graph and rows are
        built, and written as a new generation on disk (graph file, rows, the label map
        of a ``meta.json`` not yet in place), from the scope of a moment (its live labels,
        a copy of its label map, its cursor), without the scope's lock; only the end
        holds it alone, to bring the in-memory graph and rows up to the changes applied
        in between, swap them in and rename the new ``meta.json`` into place: the disk
        then holds the scope of that moment, and the changes since are the next
        checkpoint's (the cursor on disk never passes that moment's). Rows of records
        hidden in between stay in the new rows file until their own purge. Returns False,
        having changed nothing, when the scope was reset, dropped or given its first rows
        meanwhile: try again."""
        state = self._scope(scope_key)
        with state.changing, state.lock.write():
            for record_id in record_ids:
                self._hide(state, record_id)
            if state.rows is None:  # no vector was ever written: nothing to rebuild
                self._save(scope_key, state)
                return True
            source: VectorRows = state.rows
            live = state.labels.live_labels()
            count = source.count
            labels, cursor, unsaved, saves = state.labels.copy(), state.cursor, state.unsaved, state.saves
            state.generation += 1  # this purge's; a save meanwhile takes the next
            generation = state.generation
            graph_path = self._dir(scope_key) / f"vectors-{generation}.bin"
            rows_path = self._rows_path(scope_key, state.rows_generation + 1, self._graph.storage.value)
            building = frozenset({graph_path.name, rows_path.name, "meta.json"})
            state.building.append(building)
        try:
            index, rows, rows_generation = self._fresh(scope_key, state, live, source.read, count)
        except BaseException:
            state.building.remove(building)
            raise
        written_at = time.monotonic()
        try:
            entry = self._rows_entry(rows, rows_generation, rows.sync())
            meta = self._write_generation(
                scope_key, generation, self._write_graph(scope_key, generation, index), labels, entry
            )
        except BaseException:
            state.building.remove(building)
            rows.close()
            for path in (rows.path, graph_path):
                path.unlink(missing_ok=True)
            raise
        write_seconds = time.monotonic() - written_at
        del labels  # the copy is on disk: not held through the wait below
        with state.changing:
            with state.lock.write():
                state.building.remove(building)
                if self._scopes.get(scope_key) is not state or state.rows is not source:
                    rows.close()
                    for path in (rows.path, graph_path, meta):
                        path.unlink(missing_ok=True)
                    return False
                now = state.labels.live_labels()
                hidden = np.setdiff1d(live, now, assume_unique=True)
                if len(hidden):  # hidden while the copy was made: out of the graph
                    index.remove(_keys(hidden))
                added = np.setdiff1d(now, live, assume_unique=True)
                if len(added):  # applied while the copy was made: into both (rows past the copy's)
                    vectors = source.read(added)
                    for label, vector in zip(added.tolist(), vectors):
                        rows.write(label, vector[None, :])
                    index.add(_keys(added), _codes(vectors, index))
                rows.extend_to(state.labels.next_label)
                source.close()
                state.index, state.rows, state.rows_generation = index, rows, rows_generation
                if state.saves == saves:  # the disk still holds what the copy started from
                    self._swap_in(scope_key, state, meta, {graph_path, rows.path}, (cursor, unsaved), write_seconds)
                    return True
                # A checkpoint saved the old generation meanwhile, past what the copy holds.
                meta.unlink(missing_ok=True)
                state.unsaved += 1
            with state.lock.read():
                self._save(scope_key, state)
        return True

    def reset(self) -> None:
        self._checkpointer.discard()
        with self._saving, self._scopes_lock:  # no background save writes into what goes
            for state in self._scopes.values():
                if state.rows is not None:
                    state.rows.close()
            self._scopes = {}
            self._epoch += 1
            shutil.rmtree(self._root, ignore_errors=True)
            self._root.mkdir(parents=True, exist_ok=True)

    def drop(self, scope_key: str) -> None:
        """Delete one scope's vectors and cursor (the scope moved to other replicas);
        a load of it in flight is not kept, a checkpoint due for it finds it gone."""
        with self._saving, self._scopes_lock:
            state = self._scopes.pop(scope_key, None)
            if state is not None and state.rows is not None:
                state.rows.close()
            self._epoch += 1
            shutil.rmtree(self._dir(scope_key), ignore_errors=True)

    def held(self, scope_key: str) -> bool:
        """Whether the scope has vector files or a cursor on disk."""
        return self._dir(scope_key).is_dir()

    def check(self, scope_key: str) -> None:
        """Raise CorruptIndex if the scope's files cannot be loaded."""
        self._scope(scope_key)

    # -- search -----------------------------------------------------------------------

    def search(self, scope_key: str, query: np.ndarray, limit: int) -> list[SemanticHit]:
        """Records by best-passage inner product with ``query``, best first. Searches of
        one scope run in parallel, beside a background save too."""
        state = self._scope(scope_key)
        with state.lock.read():
            k = self._depth(state, limit)
            if k is None:
                return []
            return self._search_locked(state, query, k, limit)

    def _ef(self, state: _ScopeVectors, k: int) -> int:
        """The search depth for ``k`` candidates from this scope's index, as it is now."""
        return max(self._graph.expansion_for(state.live_count), k)

    @staticmethod
    def _depth(state: _ScopeVectors, limit: int) -> int | None:
        """How many passages to ask for so that ``limit`` distinct records survive
        aggregation (None: nothing to search)."""
        live = state.live_count
        if live == 0 or limit <= 0:
            return None
        per_record = live / max(1, state.labels.record_count)
        return min(live, int(limit * per_record) + 16)

    def _search_locked(self, state: _ScopeVectors, query: np.ndarray, k: int, limit: int) -> list[SemanticHit]:
        vector = query.reshape(-1).astype(np.float32, copy=False)
        found = state.searches.submit(self._request(state, vector, k))
        if len(found.labels) < k:
            # After many deletions the graph may reach fewer than k live elements;
            # the live set is then small enough to score exactly, all of it.
            live = state.live_count
            found = state.searches.submit(_GraphSearch(state, vector, live, walk=live, exact=True))
        labels = found.labels.tolist()
        similarities = found.similarities.astype(np.float64).tolist()
        best: dict[str, float] = {}
        for label, record_id, similarity in zip(labels, state.labels.owners(labels), similarities):
            if record_id is None:  # the index holds live labels only
                raise KeyError(label)
            if similarity > best.get(record_id, -2.0):
                best[record_id] = similarity
        ranked = sorted(best.items(), key=lambda item: (-item[1], item[0]))[:limit]
        times = state.labels.valid_times([record_id for record_id, _ in ranked])
        return [SemanticHit(r, s, t) for (r, s), t in zip(ranked, times)]

    def _request(self, state: _ScopeVectors, vector: np.ndarray, k: int) -> _GraphSearch:
        """The search for ``k`` passages the profile asks of this scope as it is now: its
        candidates for rescoring (``rescore_for(k)``) from every code when the scope is
        scanned, else from a walk at the scope's depth."""
        walk = min(self._graph.rescore_for(k), state.live_count)
        if self._graph.scans(state.live_count):
            return _GraphSearch(state, vector, k, walk=walk, exact=True)
        return _GraphSearch(state, vector, k, walk=walk, ef=self._ef(state, walk))

    def similarities(self, scope_key: str, query: np.ndarray, record_ids: Sequence[str]) -> dict[str, float]:
        """Exact best-passage similarity for each known record (used to explain and fuse)."""
        state = self._scope(scope_key)
        with state.lock.read():
            known, counts, labels = state.labels.gather(record_ids)
            if not known:
                return {}
            scores = state.read(labels) @ query.reshape(-1).astype(np.float32, copy=False)
            starts = np.cumsum([0, *counts[:-1]])
            return dict(zip(known, np.maximum.reduceat(scores, starts).tolist()))

    def raw_knn(self, scope_key: str, queries: np.ndarray, k: int, ef: int | None) -> np.ndarray:
        """The vector index alone, for benchmarks: labels of each query row's ``k`` best
        passages, rescored exactly from the profile's number of candidates for ``k``,
        found by a graph walk at ``ef`` (the walk at least that deep) or, when ``ef`` is
        None, by scoring every code (passage labels, no aggregation per record);
        ``label_record`` names them."""
        state = self._scope(scope_key)
        rows = np.atleast_2d(queries).astype(np.float32, copy=False)
        with state.changing, state.lock.write():
            walk = min(self._graph.rescore_for(k), state.live_count)
            found = _search(state, rows, k, walk, 0 if ef is None else max(ef, walk), ef is None)
        return np.stack([f.labels for f in found])

    def raw_bulk_probe(self, dim: int) -> Callable[[np.ndarray], None]:
        """usearch alone indexing in bulk, for benchmarks: a fresh in-memory index with
        this channel's graph parameters, and ``add(rows)`` that adds the rows' codes
        (float32 rows, one passage vector each) under the next labels in one call, as
        ``apply`` adds a batch (the rows file's appends are the channel's own cost)."""
        index = _new_index(dim, self._graph)
        added = 0

        def add(rows: np.ndarray) -> None:
            nonlocal added
            index.add(_keys(range(added, added + len(rows))), _codes(rows, index))
            added += len(rows)

        return add

    def passage_vectors(self, scope_key: str, record_id: str) -> np.ndarray | None:
        """The record's passage vectors as indexed (one row per passage, in passage
        order), or None when the record is not in the index."""
        state = self._scope(scope_key)
        with state.lock.read():
            labels = state.labels.labels(record_id)
            return None if labels is None else state.read(labels)

    def label_record(self, scope_key: str, label: int) -> str | None:
        """The record a passage label of ``raw_knn`` belongs to (None: no such label)."""
        return self._scope(scope_key).labels.owner(label)

    # -- internals --------------------------------------------------------------------

    def _dir(self, scope_key: str) -> Path:
        return self._root / hashlib.sha256(scope_key.encode()).hexdigest()[:32]

    def _scope(self, scope_key: str) -> _ScopeVectors:
        """The scope's loaded state, loading it first if needed. A load (reading and
        checking the vector file, perhaps rebuilding it) holds only that scope's loading
        lock, so searches and applies of other scopes never wait for it."""
        while True:
            with self._scopes_lock:
                state = self._scopes.get(scope_key)
                if state is not None:
                    return state
                loading = self._loading.setdefault(scope_key, threading.Lock())
                epoch = self._epoch
            with loading:
                with self._scopes_lock:
                    state = self._scopes.get(scope_key)
                    if state is not None:
                        return state
                state = self._load(scope_key)
                with self._scopes_lock:
                    if self._epoch == epoch:
                        self._scopes[scope_key] = state
                        return state
            # A reset ran during the load: load again from what the disk holds now.

    def _load(self, scope_key: str) -> _ScopeVectors:
        directory = self._dir(scope_key)
        try:
            saved = read_meta(directory / "meta.json")
        except (OSError, ValueError) as exc:
            raise CorruptIndex(f"vector index unreadable: {type(exc).__name__}") from exc
        if saved is None:
            # meta.json is swapped in only after a generation's files are durable, and
            # never removed: without it nothing was ever saved, and vector files here are
            # a first checkpoint that a crash interrupted (or rows appended before it).
            # They name no state, so they go, and the scope starts from the beginning of
            # the journal (whatever cursor.json says).
            orphans = [*directory.glob("vectors-*.bin"), *directory.glob("rows-*"), *directory.glob(".*.tmp")]
            if orphans:
                for orphan in orphans:
                    orphan.unlink(missing_ok=True)
                (directory / "cursor.json").unlink(missing_ok=True)
            cursor = self._disk_cursor(scope_key)
            return _ScopeVectors(index=_new_index(self._dim, self._graph), cursor=cursor, saved_cursor=cursor)
        meta, rows, current = saved.header, saved.rows, saved.current
        del saved
        state: _ScopeVectors | None = None
        try:
            path = directory / f"vectors-{meta['generation']}.bin"
            if meta["scope_key"] != scope_key or _sha256_file(path) != meta["sha256"]:
                raise CorruptIndex("vector file does not match its checksum")
            built_with = meta.get("graph")  # None: saved by a release that used hnswlib
            # The file's own dimension, not the encoder's: a process without the model
            # still hides and purges records of an index built with it.
            if built_with is None:
                legacy = HnswlibVectors(path)
                index = None
            else:
                index = usearch_index().Index.restore(str(path))
                if index is None:
                    raise CorruptIndex("vector file is not a vector index")
            state = _ScopeVectors(
                index=index if index is not None else _new_index(legacy.dim, self._graph),
                generation=int(meta["generation"]),
            )
            saved_rows = meta.get("rows")  # None: an earlier release kept vectors in the graph
            if saved_rows is not None:
                state.rows_generation = int(saved_rows["generation"])
                storage = VectorStorage(saved_rows["dtype"])
                state.rows = VectorRows.open_saved(
                    self._rows_path(scope_key, state.rows_generation, storage.value),
                    int(saved_rows["dim"]),
                    _ROW_TYPES[storage],
                    int(saved_rows["count"]),
                    saved_rows["sha256"],
                )
            for record_id, labels, valid_time in rows:  # streamed (see ranking.scope_meta)
                state.labels.restore(record_id, labels, valid_time)
            del rows  # (an earlier layout's parsed file) before the next steps allocate
            state.labels.reserve(int(meta["next_label"]))
        except BaseException as exc:
            if state is not None and state.rows is not None:
                state.rows.close()
            if isinstance(exc, CorruptIndex):
                raise
            if isinstance(exc, (OSError, KeyError, TypeError, ValueError, RuntimeError)):
                raise CorruptIndex(f"vector index unreadable: {type(exc).__name__}") from exc
            raise
        live = state.labels.live_labels()
        if index is None:
            if not all(label in legacy for label in live):
                raise CorruptIndex("vector labels missing from index")
            stored = legacy.rows
        else:
            if len(live) and not bool(np.all(index.contains(_keys(live)))):
                raise CorruptIndex("vector labels missing from index")
            if saved_rows is not None and len(live) and (state.rows is None or int(live[-1]) >= state.rows.count):
                raise CorruptIndex("vector labels missing from the rows")
            stored = state.read if saved_rows is not None else lambda labels: _index_rows(index, labels)  # noqa: E731
        state.cursor = state.saved_cursor = self._disk_cursor(scope_key)
        if built_with != self._graph.graph() or saved_rows is None:
            # Built otherwise (an older release, other profile parameters): rebuild now.
            self._rebuild(scope_key, state, stored)
            self._save(scope_key, state)
            return state
        if not current:  # an earlier release's meta.json layout: rewrite it (same generation)
            self._write_meta(scope_key, state, meta["sha256"], saved_rows["sha256"])
        # The files hold everything applied so far: the checkpoint clock starts now, so
        # the first changes after a restart are not due at once however old the files are.
        state.saved_at = time.monotonic()
        return state

    def _rows_path(self, scope_key: str, generation: int, dtype: str) -> Path:
        return self._dir(scope_key) / f"rows-{generation}.{dtype}"

    def _rows_of(self, scope_key: str, state: _ScopeVectors) -> VectorRows:
        """The scope's rows file, created (next generation) with its first vector."""
        if state.rows is None:
            state.rows_generation += 1
            path = self._rows_path(scope_key, state.rows_generation, self._graph.storage.value)
            state.rows = VectorRows.create(path, state.index.ndim, _ROW_TYPES[self._graph.storage])
        return state.rows

    def _rebuild(self, scope_key: str, state: _ScopeVectors, stored: Callable[[np.ndarray], np.ndarray]) -> None:
        """Replace the scope's graph and rows by fresh ones built with the configured
        parameters from the live labels' vectors (caller holds ``state.lock`` or owns
        ``state``)."""
        count = state.rows.count if state.rows is not None else 0
        fresh = self._fresh(scope_key, state, state.labels.live_labels(), stored, count)
        fresh[1].extend_to(state.labels.next_label)
        if state.rows is not None:
            state.rows.close()
        state.index, state.rows, state.rows_generation = fresh

    def _fresh(
        self,
        scope_key: str,
        state: _ScopeVectors,
        live: np.ndarray,
        stored: Callable[[np.ndarray], np.ndarray],
        count: int,
    ) -> tuple[Index, VectorRows, int]:
        """A graph built with the configured parameters from the vectors of ``live``
        (``stored`` reads them, a chunk at a time), and a new rows generation holding
        their rows only (of the first ``count`` rows, every other row zero), so that
        vectors of hidden labels are in neither. Changes nothing of ``state``."""
        dim = state.rows.dim if state.rows is not None else state.index.ndim
        fresh = _new_index(dim, self._graph)
        generation = state.rows_generation + 1
        path = self._rows_path(scope_key, generation, self._graph.storage.value)
        dtype = _ROW_TYPES[self._graph.storage]
        if state.rows is not None and state.rows.dtype == dtype:
            rows = state.rows.rewritten(path, live, count)  # live rows only, every other row zero
        else:  # from an earlier release's index: its live vectors, every other row zero
            rows = VectorRows.create(path, dim, dtype)
            for start in range(0, len(live), LOAD_CHUNK):
                chunk = live[start : start + LOAD_CHUNK]
                first = int(chunk[0])
                span = np.zeros((int(chunk[-1]) - first + 1, dim), np.float32)
                span[chunk - first] = stored(chunk)
                rows.write(first, span)
        rows.extend_to(int(live[-1]) + 1 if len(live) else 0)
        for start in range(0, len(live), LOAD_CHUNK):
            chunk = live[start : start + LOAD_CHUNK]
            fresh.add(_keys(chunk), _codes(rows.read(chunk), fresh))
        return fresh, rows, generation

    def _hide(self, state: _ScopeVectors, record_id: str) -> bool:
        """Hide the record's passages; False when the scope did not hold it."""
        labels = state.labels.remove(record_id)
        if labels:
            state.index.remove(_keys(labels))
        return labels is not None

    def _write_cursor(self, scope_key: str, state: _ScopeVectors, cursor: int | None = None) -> None:
        """Record ``cursor`` (by default ``state.cursor``) on disk (caller holds
        ``state.lock``; the saved files must already hold everything it covers)."""
        cursor = state.cursor if cursor is None else cursor
        if cursor > state.saved_cursor:
            atomic_write_json(self._dir(scope_key) / "cursor.json", {"cursor": cursor})
            state.saved_cursor = cursor

    def _write_meta(self, scope_key: str, state: _ScopeVectors, sha256: str, row_hashes: list[str]) -> None:
        """Swap in the meta.json of ``state``'s generation, whose graph file has ``sha256``
        and whose rows file's blocks have ``row_hashes``."""
        rows = self._rows_entry(state.rows, state.rows_generation, row_hashes)
        header = self._header(scope_key, state.generation, sha256, state.labels.next_label, rows)
        atomic_write(self._dir(scope_key) / "meta.json", lambda tmp: write_meta(tmp, header, state.labels.records()))

    def _rows_entry(self, rows: VectorRows | None, generation: int, hashes: list[str]) -> dict[str, object] | None:
        """meta.json's entry for a rows file as it stands (its count, block ``hashes``)."""
        if rows is None:
            return None
        return {
            "generation": generation,
            "dtype": self._graph.storage.value,
            "dim": rows.dim,
            "count": rows.count,
            "sha256": hashes,
        }

    def _header(
        self, scope_key: str, generation: int, sha256: str, next_label: int, rows: dict[str, object] | None
    ) -> dict[str, object]:
        """meta.json's header for a generation whose graph file has ``sha256``."""
        return {
            "scope_key": scope_key,
            "generation": generation,
            "sha256": sha256,
            "graph": self._graph.graph(),
            "next_label": next_label,
            "rows": rows,
        }

    def _write_graph(self, scope_key: str, generation: int, index: Index) -> Path:
        """``index`` saved into a private temporary file beside its generation's graph
        file (``.vectors-<generation>.bin.*.tmp``), not yet durable: all of a save that
        needs the graph to stand still. Saving the scope's own graph, not a copy, keeps a
        large scope's memory from doubling while it saves."""
        path = self._dir(scope_key) / f"vectors-{generation}.bin"
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        os.close(fd)
        try:
            index.save(name, progress=_yielding_progress())
        except BaseException:
            Path(name).unlink(missing_ok=True)
            raise
        return Path(name)

    def _write_generation(
        self, scope_key: str, generation: int, graph: Path, labels: PassageLabels, rows: dict[str, object] | None
    ) -> Path:
        """Finish a generation beside the scope's changes, from its graph's temporary file
        (:meth:`_write_graph`), a label map no change reaches (a copy, or a purge's own)
        and a durable rows file's entry: the graph file made durable, named and hashed,
        and its ``meta.json`` written as a temporary file (returned) that the caller
        renames into place under the scope's lock (:meth:`_swap_in`), or removes."""
        path = self._dir(scope_key) / f"vectors-{generation}.bin"
        try:
            with open(graph, "rb+") as handle:
                os.fsync(handle.fileno())
            os.replace(graph, path)
        except BaseException:
            graph.unlink(missing_ok=True)
            raise
        header = self._header(scope_key, generation, _sha256_file(path), labels.next_label, rows)
        return prepared_write(self._dir(scope_key) / "meta.json", lambda tmp: write_meta(tmp, header, labels.records()))

    def _swap_in(
        self, scope_key: str, state: _ScopeVectors, meta: Path, keep: set[Path], moment: tuple[int, int], seconds: float
    ) -> None:
        """Rename a generation written by :meth:`_write_generation` into place (caller
        holds ``state.changing`` and ``state.lock``, and no save ran since the
        ``moment`` it was written from: (cursor, unsaved changes) then). The changes made
        since stay unsaved, and the cursor on disk passes the moment's only when there
        are none."""
        os.replace(meta, self._dir(scope_key) / "meta.json")
        self._remove_stale(scope_key, state, keep)
        cursor, unsaved = moment
        state.unsaved -= unsaved
        self._write_cursor(scope_key, state, state.cursor if state.unsaved == 0 else cursor)
        self._saved(state, seconds)

    def _background_save(self, scope_key: str) -> None:
        """A due checkpoint, on the checkpointer's thread, beside the scope's searches and
        changes: under the lock, only what needs the scope to stand still (its graph
        saved to a temporary file, its label map copied, its rows made durable as far as
        they go, its cursor); the rest of the generation (the graph file made durable
        and hashed, ``meta.json`` with the label map) is written without it, and the lock
        is taken again to rename ``meta.json`` into place (see :meth:`_swap_in`). A
        purge, or a save, that swapped in meanwhile wins: this one is discarded, and the
        next apply asks again."""
        with self._saving:
            with self._scopes_lock:
                state = self._scopes.get(scope_key)
            if state is None:  # reset since it fell due
                return
            with state.changing, state.lock.read():
                if not state.unsaved or state.building:  # another is being written: the next apply asks again
                    return
                started = time.monotonic()
                state.generation += 1
                generation = state.generation
                graph_path = self._dir(scope_key) / f"vectors-{generation}.bin"
                building = frozenset({graph_path.name, "meta.json"})
                state.building.append(building)
                try:
                    graph = self._write_graph(scope_key, generation, state.index)
                except BaseException:
                    state.building.remove(building)
                    raise
                rows = state.rows
                entry = self._rows_entry(rows, state.rows_generation, rows.sync() if rows is not None else [])
                labels, moment, saves = state.labels.copy(), (state.cursor, state.unsaved), state.saves
            try:
                meta = self._write_generation(scope_key, generation, graph, labels, entry)
            except BaseException:
                state.building.remove(building)
                graph_path.unlink(missing_ok=True)
                raise
            del labels
            with state.changing, state.lock.read():
                state.building.remove(building)
                if self._scopes.get(scope_key) is not state or state.saves != saves or state.rows is not rows:
                    for path in (graph_path, meta):
                        path.unlink(missing_ok=True)
                    return
                keep = {graph_path, *([rows.path] if rows is not None else [])}
                self._swap_in(scope_key, state, meta, keep, moment, time.monotonic() - started)

    def _save(self, scope_key: str, state: _ScopeVectors) -> None:
        """Checkpoint: a new vector generation, then meta.json, then the cursor (caller
        holds ``state.changing`` and ``state.lock``, or owns ``state``)."""
        started = time.monotonic()
        directory = self._dir(scope_key)
        directory.mkdir(parents=True, exist_ok=True)
        state.generation += 1
        path = directory / f"vectors-{state.generation}.bin"
        row_hashes = state.rows.sync() if state.rows is not None else []  # durable first
        # Through a private temporary file, fsync'd, so meta.json never names a vector
        # file that is not durable, and no other user can read the vectors.
        atomic_write(path, lambda tmp: state.index.save(str(tmp), progress=_yielding_progress()))
        self._write_meta(scope_key, state, _sha256_file(path), row_hashes)
        self._remove_stale(scope_key, state, {path, state.rows.path if state.rows is not None else path})
        self._write_cursor(scope_key, state)
        state.unsaved = 0
        self._saved(state, time.monotonic() - started)

    def _remove_stale(self, scope_key: str, state: _ScopeVectors, keep: set[Path]) -> None:
        """Delete older generations, and temporary files a crash left behind (they may
        hold vectors of records forgotten since): all but ``keep`` and what a purge is
        writing (``state.building``, and its temporary files)."""
        directory = self._dir(scope_key)
        building = {name for names in state.building for name in names}
        for stale in [*directory.glob("vectors-*.bin"), *directory.glob("rows-*"), *directory.glob(".*.tmp")]:
            if stale in keep or stale.name in building or any(stale.name.startswith(f".{n}.") for n in building):
                continue
            stale.unlink(missing_ok=True)

    @staticmethod
    def _saved(state: _ScopeVectors, seconds: float) -> None:
        """Note a generation swapped in on disk, which took ``seconds`` to save."""
        state.saves += 1
        state.saved_at = time.monotonic()
        state.save_seconds = seconds
