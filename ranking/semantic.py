"""The semantic channel: one hnswlib index per scope over passage vectors.

Why per scope: an approximate nearest-neighbour search cannot be filtered cheaply (a
Python ``filter=`` callable holds the GIL), and a shared graph would let one tenant's
vectors crowd another's out of the top k. Per-scope files also make a purge a rebuild of
one small index.

Records are embedded as passages (see :mod:`ranking.documents`): up to four overlapping
180-word windows of primary + decision + evidence + context, and a record scores by its
best passage, so text past the model's 256-token window stays searchable: a record's
later text (decisions, evidence) would otherwise be invisible to this channel (passages
against head-only vectors, measured: ``eval/RESULTS.md``).

Files per scope (``root/<sha256(scope)[:32]>/``): ``vectors-<generation>.bin`` (hnswlib),
``meta.json`` (scope key, generation, sha256 of the vector file, label map, valid times)
and ``cursor.json``. A save writes a new generation, then swaps ``meta.json`` atomically,
then deletes older generations, then writes ``cursor.json``, so a crash leaves the
previous consistent state and the cursor on disk never claims more than the saved file
holds. The checksum is verified before the native loader ever reads the file, so a
damaged file is reported as ``index corrupt`` instead of crashing the process.

Deferred saving: a save rewrites the whole scope (vector file, checksum, label map), so
saving on every apply made bulk loading quadratic and made each admission pay a full
save. ``apply`` therefore changes only the in-memory index and the in-memory cursor (what
search and :meth:`SemanticIndex.cursor` read); a *checkpoint* makes it durable once
``checkpoint_records`` records were applied or ``checkpoint_seconds`` passed since the
scope's last save (checked on apply, and spaced by :data:`CHECKPOINT_SPACING`; a scope
never saved is due at once, so its first apply is saved), on :meth:`SemanticIndex.checkpoint` and
:meth:`SemanticIndex.close`, and always before :meth:`SemanticIndex.purge` returns (a
purge must reach the disk). After a crash the scope reopens at its last checkpoint, with
that checkpoint's cursor, and the engine's projector re-applies the journal from there
(re-deriving from current state, so the repeat is harmless). An apply that only moves
the cursor of a scope with nothing unsaved writes the cursor at once.
"""

from __future__ import annotations

import hashlib
import shutil
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import hnswlib
import numpy as np

from ranking.read_write_lock import ReadWriteLock
from ranking.storage import atomic_write, atomic_write_json, read_json

HNSW_M = 16
HNSW_EF_CONSTRUCTION = 200
HNSW_EF_SEARCH = 128
INITIAL_CAPACITY = 1024
# Checkpoint defaults: at most this many applied records (about a second of embedding at
# most, since each costs a model call, and within the engine's semantic lag bound of
# 1000 journal events) or this many seconds of applies are lost to a crash and re-applied.
CHECKPOINT_RECORDS = 1000
CHECKPOINT_SECONDS = 30.0
# A due checkpoint also waits until this many times its scope's last save duration has
# passed since that save, so saving costs at most about a tenth of apply time however
# large the scope grows (bulk loading stays linear; the window grows with save cost).
CHECKPOINT_SPACING = 9.0
# Vectors are read back from a loaded index this many at a time: hnswlib's get_items
# builds Python lists before its numpy array, about 12 GB at once for a million vectors.
LOAD_CHUNK = 16_384


class SemanticUnavailable(Exception):
    """The semantic channel cannot serve this request (reason in the message)."""


class CorruptIndex(Exception):
    """A scope's vector files are missing, truncated or do not match their checksum."""


@dataclass(frozen=True)
class SemanticHit:
    record_id: str
    similarity: float
    valid_time_ms: int


@dataclass
class _ScopeVectors:
    """One scope's in-memory index and the maps hnswlib does not keep for us."""

    index: hnswlib.Index
    vectors: np.ndarray  # row = label; a copy hnswlib's slow get_items cannot serve fast
    generation: int = 0
    next_label: int = 0
    label_record: dict[int, str] = field(default_factory=dict)
    record_labels: dict[str, list[int]] = field(default_factory=dict)
    valid_time: dict[str, int] = field(default_factory=dict)
    cursor: int = 0  # in memory: what this process has applied
    saved_cursor: int = 0  # what cursor.json says (never beyond the saved files)
    unsaved: int = 0  # records changed since the last save
    saved_at: float = float("-inf")  # time.monotonic() of the last save; never: -inf
    save_seconds: float = 0.0  # how long the last save took
    ef: int = HNSW_EF_SEARCH  # the index's search depth now (hnswlib keeps one per index)
    # Searches share it; applies, saves, purges and depth changes hold it alone.
    lock: ReadWriteLock = field(default_factory=ReadWriteLock)

    @property
    def live_count(self) -> int:
        return len(self.label_record)


def _new_index(dim: int, capacity: int) -> hnswlib.Index:
    index = hnswlib.Index(space="ip", dim=dim)
    index.init_index(max_elements=max(capacity, 16), M=HNSW_M, ef_construction=HNSW_EF_CONSTRUCTION)
    index.set_ef(HNSW_EF_SEARCH)
    return index


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
        checkpoint_records: int = CHECKPOINT_RECORDS,
        checkpoint_seconds: float = CHECKPOINT_SECONDS,
        checkpoint_spacing: float = CHECKPOINT_SPACING,
    ) -> None:
        self._root = root
        self._dim = dim
        self._checkpoint_records = max(1, int(checkpoint_records))
        self._checkpoint_seconds = float(checkpoint_seconds)
        self._spacing = float(checkpoint_spacing)
        root.mkdir(parents=True, exist_ok=True)
        self._scopes: dict[str, _ScopeVectors] = {}
        self._scopes_lock = threading.Lock()

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
        removals: Sequence[str],
        upserts: Sequence[tuple[str, int, np.ndarray]],
        through_cursor: int,
    ) -> None:
        """Replace each upserted record's passages, hide removals, move the cursor; save
        when a checkpoint is due (see the module docstring).

        ``upserts`` holds (record_id, valid_time_ms, passage vectors as rows).
        """
        state = self._scope(scope_key)
        with state.lock.write():
            upserted = {r for r, _, _ in upserts}
            changed = len(upserted)
            for record_id in {*removals, *upserted}:
                if self._hide(state, record_id) and record_id not in upserted:
                    changed += 1
            rows = [np.asarray(v, dtype=np.float32).reshape(-1, self._dim) for _, _, v in upserts]
            total = sum(len(r) for r in rows)
            if total:
                needed = state.index.get_current_count() + total
                if needed > state.index.get_max_elements():
                    state.index.resize_index(max(needed, 2 * state.index.get_max_elements()))
                    state.index.set_ef(state.ef)
                labels: list[int] = []
                for (record_id, valid_time, _), vectors in zip(upserts, rows):
                    own = list(range(state.next_label, state.next_label + len(vectors)))
                    state.next_label += len(vectors)
                    state.record_labels[record_id] = own
                    state.valid_time[record_id] = int(valid_time)
                    for label in own:
                        state.label_record[label] = record_id
                    labels.extend(own)
                matrix = np.vstack(rows)
                state.index.add_items(matrix, np.asarray(labels, dtype=np.int64))
                if state.next_label > len(state.vectors):
                    grown = np.zeros((max(state.next_label, 2 * len(state.vectors)), self._dim), np.float32)
                    grown[: len(state.vectors)] = state.vectors
                    state.vectors = grown
                state.vectors[labels] = matrix
            state.cursor = max(state.cursor, through_cursor)
            state.unsaved += changed
            if state.unsaved == 0:
                self._write_cursor(scope_key, state)  # nothing unsaved: the files hold it all
            else:
                elapsed = time.monotonic() - state.saved_at
                due = state.unsaved >= self._checkpoint_records or elapsed >= self._checkpoint_seconds
                if due and elapsed >= self._spacing * state.save_seconds:
                    self._save(scope_key, state)

    def checkpoint(self, scope_key: str | None = None) -> None:
        """Save every loaded scope (or just ``scope_key``) with unsaved changes."""
        with self._scopes_lock:
            states = (
                list(self._scopes.items())
                if scope_key is None
                else [(scope_key, self._scopes[scope_key])] if scope_key in self._scopes else []
            )
        for key, state in states:
            with state.lock.write():
                if state.unsaved:
                    self._save(key, state)
                elif state.cursor > state.saved_cursor:
                    self._write_cursor(key, state)

    def close(self) -> None:
        """Checkpoint every scope (the in-memory indexes stay usable)."""
        self.checkpoint()

    def purge(self, scope_key: str, record_ids: Sequence[str]) -> None:
        """Rebuild the scope's index from live vectors only and save it (with anything
        else unsaved) before returning, so hidden ones leave the disk."""
        state = self._scope(scope_key)
        with state.lock.write():
            for record_id in record_ids:
                self._hide(state, record_id)
            live = sorted(state.label_record)
            fresh = _new_index(self._dim, max(INITIAL_CAPACITY, len(live)))
            if live:
                fresh.add_items(state.vectors[live], np.asarray(live, dtype=np.int64))
            hidden = np.ones(len(state.vectors), dtype=bool)
            hidden[live] = False
            state.vectors[hidden] = 0.0
            state.index, state.ef = fresh, HNSW_EF_SEARCH
            self._save(scope_key, state)

    def reset(self) -> None:
        with self._scopes_lock:
            self._scopes = {}
            shutil.rmtree(self._root, ignore_errors=True)
            self._root.mkdir(parents=True, exist_ok=True)

    def check(self, scope_key: str) -> None:
        """Raise CorruptIndex if the scope's files cannot be loaded."""
        self._scope(scope_key)

    # -- search -----------------------------------------------------------------------

    @staticmethod
    def _exact(state: _ScopeVectors, query: np.ndarray) -> list[tuple[int, float]]:
        live = sorted(state.label_record)
        scores = state.vectors[live] @ query.astype(np.float32)
        return list(zip(live, scores.tolist()))

    def search(self, scope_key: str, query: np.ndarray, limit: int) -> list[SemanticHit]:
        """Records by best-passage inner product with ``query``, best first. Searches of
        one scope run in parallel; one that needs another search depth sets it alone."""
        state = self._scope(scope_key)
        with state.lock.read():
            k = self._depth(state, limit)
            if k is None:
                return []
            if max(HNSW_EF_SEARCH, k) == state.ef:
                return self._search_locked(state, query, k, limit)
        with state.lock.write():
            k = self._depth(state, limit)
            if k is None:
                return []
            if max(HNSW_EF_SEARCH, k) != state.ef:
                state.ef = max(HNSW_EF_SEARCH, k)
                state.index.set_ef(state.ef)
            return self._search_locked(state, query, k, limit)

    @staticmethod
    def _depth(state: _ScopeVectors, limit: int) -> int | None:
        """How many passages to ask for so that ``limit`` distinct records survive
        aggregation (None: nothing to search)."""
        live = state.live_count
        if live == 0 or limit <= 0:
            return None
        per_record = live / max(1, len(state.record_labels))
        return min(live, int(limit * per_record) + 16)

    def _search_locked(self, state: _ScopeVectors, query: np.ndarray, k: int, limit: int) -> list[SemanticHit]:
        try:
            labels, distances = state.index.knn_query(query.reshape(1, -1), k=k)
            pairs = zip(labels[0].tolist(), (1.0 - d for d in distances[0].tolist()))
        except RuntimeError:
            # After many deletions the graph may reach fewer than k live elements;
            # the live set is then small enough to score exactly.
            pairs = self._exact(state, query)
        best: dict[str, float] = {}
        for label, similarity in pairs:
            record_id = state.label_record[label]
            if similarity > best.get(record_id, -2.0):
                best[record_id] = similarity
        ranked = sorted(best.items(), key=lambda item: (-item[1], item[0]))[:limit]
        return [SemanticHit(r, s, state.valid_time[r]) for r, s in ranked]

    def similarities(self, scope_key: str, query: np.ndarray, record_ids: Sequence[str]) -> dict[str, float]:
        """Exact best-passage similarity for each known record (used to explain and fuse)."""
        state = self._scope(scope_key)
        with state.lock.read():
            known = [r for r in record_ids if r in state.record_labels]
            if not known:
                return {}
            labels = [label for r in known for label in state.record_labels[r]]
            scores = state.vectors[labels] @ query.reshape(-1)
            out: dict[str, float] = {}
            for label, score in zip(labels, scores.tolist()):
                record_id = state.label_record[label]
                out[record_id] = max(out.get(record_id, -2.0), float(score))
            return out

    def raw_knn(self, scope_key: str, queries: np.ndarray, k: int, ef: int) -> np.ndarray:
        """hnswlib alone, for benchmarks: ``knn_query`` labels of each query row at ``ef``
        (passage labels, no aggregation per record); ``label_record`` names them."""
        state = self._scope(scope_key)
        with state.lock.write():
            state.ef = ef
            state.index.set_ef(ef)
            labels, _ = state.index.knn_query(np.atleast_2d(queries), k=k)
        return labels

    def passage_vectors(self, scope_key: str, record_id: str) -> np.ndarray | None:
        """The record's passage vectors as indexed (one row per passage, in passage
        order), or None when the record is not in the index."""
        state = self._scope(scope_key)
        with state.lock.read():
            labels = state.record_labels.get(record_id)
            return None if labels is None else np.array(state.vectors[labels], dtype=np.float32)

    def label_record(self, scope_key: str, label: int) -> str | None:
        """The record a passage label of ``raw_knn`` belongs to (None: no such label)."""
        return self._scope(scope_key).label_record.get(label)

    # -- internals --------------------------------------------------------------------

    def _dir(self, scope_key: str) -> Path:
        return self._root / hashlib.sha256(scope_key.encode()).hexdigest()[:32]

    def _scope(self, scope_key: str) -> _ScopeVectors:
        with self._scopes_lock:
            state = self._scopes.get(scope_key)
            if state is None:
                state = self._load(scope_key)
                self._scopes[scope_key] = state
            return state

    def _load(self, scope_key: str) -> _ScopeVectors:
        directory = self._dir(scope_key)
        meta = read_json(directory / "meta.json")
        if meta is None:
            if any(directory.glob("vectors-*.bin")):
                raise CorruptIndex("vector metadata missing")
            cursor = self._disk_cursor(scope_key)
            return _ScopeVectors(
                index=_new_index(self._dim, INITIAL_CAPACITY),
                vectors=np.zeros((0, self._dim), np.float32),
                cursor=cursor,
                saved_cursor=cursor,
            )
        try:
            path = directory / f"vectors-{meta['generation']}.bin"
            if meta["scope_key"] != scope_key or _sha256_file(path) != meta["sha256"]:
                raise CorruptIndex("vector file does not match its checksum")
            index = hnswlib.Index(space="ip", dim=self._dim)
            index.load_index(str(path), max_elements=int(meta["capacity"]))
            index.set_ef(HNSW_EF_SEARCH)
            state = _ScopeVectors(
                index=index,
                vectors=np.zeros((int(meta["next_label"]), self._dim), np.float32),
                generation=int(meta["generation"]),
                next_label=int(meta["next_label"]),
            )
            for record_id, labels, valid_time in meta["records"]:
                state.record_labels[record_id] = list(labels)
                state.valid_time[record_id] = int(valid_time)
                for label in labels:
                    state.label_record[label] = record_id
        except CorruptIndex:
            raise
        except (OSError, KeyError, TypeError, ValueError, RuntimeError) as exc:
            raise CorruptIndex(f"vector index unreadable: {type(exc).__name__}") from exc
        present = set(index.get_ids_list())
        if not set(state.label_record) <= present:
            raise CorruptIndex("vector labels missing from index")
        live = sorted(state.label_record)
        for start in range(0, len(live), LOAD_CHUNK):
            chunk = live[start : start + LOAD_CHUNK]
            state.vectors[chunk] = index.get_items(chunk, return_type="numpy")
        state.cursor = state.saved_cursor = self._disk_cursor(scope_key)
        try:  # when the files were saved, on the monotonic clock
            age = max(0.0, time.time() - (directory / "meta.json").stat().st_mtime)
            state.saved_at = time.monotonic() - age
        except OSError:
            pass
        return state

    def _hide(self, state: _ScopeVectors, record_id: str) -> bool:
        """Hide the record's passages; False when the scope did not hold it."""
        labels = state.record_labels.pop(record_id, None)
        for label in labels or ():
            state.index.mark_deleted(label)
            del state.label_record[label]
        state.valid_time.pop(record_id, None)
        return labels is not None

    def _write_cursor(self, scope_key: str, state: _ScopeVectors) -> None:
        """Record ``state.cursor`` on disk (caller holds ``state.lock``; the saved files
        must already hold everything it covers)."""
        if state.cursor > state.saved_cursor:
            atomic_write_json(self._dir(scope_key) / "cursor.json", {"cursor": state.cursor})
            state.saved_cursor = state.cursor

    def _save(self, scope_key: str, state: _ScopeVectors) -> None:
        """Checkpoint: a new vector generation, then meta.json, then the cursor (caller
        holds ``state.lock``)."""
        started = time.monotonic()
        directory = self._dir(scope_key)
        directory.mkdir(parents=True, exist_ok=True)
        state.generation += 1
        path = directory / f"vectors-{state.generation}.bin"
        # Through a private temporary file, fsync'd, so meta.json never names a vector
        # file that is not durable, and no other user can read the vectors.
        atomic_write(path, lambda tmp: state.index.save_index(str(tmp)))
        meta = {
            "scope_key": scope_key,
            "generation": state.generation,
            "sha256": _sha256_file(path),
            "capacity": state.index.get_max_elements(),
            "next_label": state.next_label,
            "records": [
                [record_id, labels, state.valid_time[record_id]]
                for record_id, labels in sorted(state.record_labels.items())
            ],
        }
        atomic_write_json(directory / "meta.json", meta)
        # Older generations, and temporary files a crash left behind (they may hold
        # vectors of records forgotten since), are no longer referenced.
        for stale in [*directory.glob("vectors-*.bin"), *directory.glob(".*.tmp")]:
            if stale != path:
                stale.unlink(missing_ok=True)
        self._write_cursor(scope_key, state)
        state.unsaved = 0
        state.saved_at = time.monotonic()
        state.save_seconds = state.saved_at - started
