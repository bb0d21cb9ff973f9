"""The semantic channel: one hnswlib index per scope over passage vectors.

Why per scope: an approximate nearest-neighbour search cannot be filtered cheaply (a
Python ``filter=`` callable holds the GIL), and a shared graph would let one tenant's
vectors crowd another's out of the top k. Per-scope files also make a purge a rebuild of
one small index.

Records are embedded as passages (see :mod:`ranking.documents`): up to four overlapping
180-word windows of primary + decision + evidence + context, and a record scores by its
best passage, so text past the model's 256-token window stays searchable. Measured
through this module on the dev collections (nDCG@10, passages vs head only): cisi 0.428
vs 0.421, medline 0.791 vs 0.789, npl and adi equal, cranfield 0.353 vs 0.358; about
1.2 vectors per record. Chunking was kept because a record's later text (decisions,
evidence) would otherwise be invisible to this channel.

Files per scope (``root/<sha256(scope)[:32]>/``): ``vectors-<generation>.bin`` (hnswlib),
``meta.json`` (scope key, generation, sha256 of the vector file, label map, valid times)
and ``cursor.json``. A save writes a new generation, then swaps ``meta.json`` atomically,
then deletes the old generation, so a crash leaves the previous consistent state. The
checksum is verified before the native loader ever reads the file, so a damaged file is
reported as ``index corrupt`` instead of crashing the process.
"""

from __future__ import annotations

import hashlib
import shutil
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import hnswlib
import numpy as np

from ranking.storage import atomic_write_json, read_json

HNSW_M = 16
HNSW_EF_CONSTRUCTION = 200
HNSW_EF_SEARCH = 128
INITIAL_CAPACITY = 1024


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
    cursor: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

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

    def __init__(self, root: Path, dim: int) -> None:
        self._root = root
        self._dim = dim
        root.mkdir(parents=True, exist_ok=True)
        self._scopes: dict[str, _ScopeVectors] = {}
        self._scopes_lock = threading.Lock()

    # -- projection -------------------------------------------------------------------

    def cursor(self, scope_key: str) -> int:
        """The scope's cursor, readable even when its vector file is damaged."""
        value = read_json(self._dir(scope_key) / "cursor.json")
        return int(value["cursor"]) if value else 0

    def apply(
        self,
        scope_key: str,
        removals: Sequence[str],
        upserts: Sequence[tuple[str, int, np.ndarray]],
        through_cursor: int,
    ) -> None:
        """Replace each upserted record's passages, hide removals, save, move the cursor.

        ``upserts`` holds (record_id, valid_time_ms, passage vectors as rows).
        """
        state = self._scope(scope_key)
        with state.lock:
            for record_id in {*removals, *(r for r, _, _ in upserts)}:
                self._hide(state, record_id)
            rows = [np.asarray(v, dtype=np.float32).reshape(-1, self._dim) for _, _, v in upserts]
            total = sum(len(r) for r in rows)
            if total:
                needed = state.index.get_current_count() + total
                if needed > state.index.get_max_elements():
                    state.index.resize_index(max(needed, 2 * state.index.get_max_elements()))
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
            self._save(scope_key, state)
            if through_cursor > state.cursor:
                state.cursor = through_cursor
                atomic_write_json(self._dir(scope_key) / "cursor.json", {"cursor": through_cursor})

    def purge(self, scope_key: str, record_ids: Sequence[str]) -> None:
        """Rebuild the scope's index from live vectors only, so hidden ones leave the disk."""
        state = self._scope(scope_key)
        with state.lock:
            for record_id in record_ids:
                self._hide(state, record_id)
            live = sorted(state.label_record)
            fresh = _new_index(self._dim, max(INITIAL_CAPACITY, len(live)))
            if live:
                fresh.add_items(state.vectors[live], np.asarray(live, dtype=np.int64))
            hidden = np.ones(len(state.vectors), dtype=bool)
            hidden[live] = False
            state.vectors[hidden] = 0.0
            state.index = fresh
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
        """Records by best-passage inner product with ``query``, best first."""
        state = self._scope(scope_key)
        with state.lock:
            live = state.live_count
            if live == 0 or limit <= 0:
                return []
            # Ask for enough passages that ``limit`` distinct records survive aggregation.
            per_record = live / max(1, len(state.record_labels))
            k = min(live, int(limit * per_record) + 16)
            state.index.set_ef(max(HNSW_EF_SEARCH, k))
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
        with state.lock:
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
            return _ScopeVectors(
                index=_new_index(self._dim, INITIAL_CAPACITY), vectors=np.zeros((0, self._dim), np.float32)
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
        if live:
            state.vectors[live] = index.get_items(live, return_type="numpy")
        state.cursor = self.cursor(scope_key)
        return state

    def _hide(self, state: _ScopeVectors, record_id: str) -> None:
        for label in state.record_labels.pop(record_id, []):
            state.index.mark_deleted(label)
            del state.label_record[label]
        state.valid_time.pop(record_id, None)

    def _save(self, scope_key: str, state: _ScopeVectors) -> None:
        directory = self._dir(scope_key)
        directory.mkdir(parents=True, exist_ok=True)
        old = state.generation
        state.generation += 1
        path = directory / f"vectors-{state.generation}.bin"
        state.index.save_index(str(path))
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
        (directory / f"vectors-{old}.bin").unlink(missing_ok=True)
