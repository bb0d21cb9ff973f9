"""Seed vectors: a live replica's passage vectors, handed to a new replica's warm-up.

Why: a replica that starts with an empty data directory on a shared store projects every
scope from the journal, and its semantic channel embeds every record again (a few to a
few tens of records a second on a CPU: hours per million records). Every running
replica holds those vectors already. ``engram admin export-vectors OUT`` writes them out
through a live replica (:func:`write_seed`); ``engram serve --seed-vectors OUT`` opens
them (:meth:`SeedVectors.open`) as a lookup the projector consults during warm-up.

The seed is a lookup, never a projection: the projector still re-derives each record
from the store's current state, and takes a seed's rows only for an accepted_current
record whose id and passage-text digest (:func:`ranking.passages_digest` of the windows
it would embed) are in the seed; everything else is embedded. A record forgotten,
withdrawn or disputed since the export is therefore never indexed, and forget's
guarantee is the one a replica has without a seed. A seed written under another encoder,
passage windowing or dimension is ignored whole, with a warning.

Layout of OUT (a directory, mode 0700, its files 0600; it holds derived content, so it
is kept like a backup, and deleted once the new replicas are ready):

* ``seed.json``: format, encoder, windowing, dim, dtype, and per scope key the counts;
* ``<scope_key>.ids.npy``: the record ids (bytes), in export order;
* ``<scope_key>.digests.npy``: (records, 32) uint8, each record's passage-text digest;
* ``<scope_key>.offsets.npy``: (records + 1) int64, record i owns rows offsets[i]:offsets[i+1];
* ``<scope_key>.vectors``: the raw rows, (passages, dim) of dtype, memory-mapped on read.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import threading
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import numpy as np

from engram.ranking import HYBRID_PROFILE, IndexDocument, VectorSpace, passages, passages_digest
from engram.ranking.profiles import VectorStorage

from .records import index_document

if TYPE_CHECKING:
    from .export import ExportedRecord

logger = logging.getLogger("engram.seed")

FORMAT = "engram-seed-vectors/1"
HEADER = "seed.json"
DIGEST_BYTES = 32


def storage_dtype() -> np.dtype:
    """The dtype the semantic index keeps its vectors in: written as such, a seed's rows
    are the indexed rows exactly (float16 halves the file; nothing is lost)."""
    semantic = HYBRID_PROFILE.config.semantic
    f16 = semantic is not None and semantic.storage is VectorStorage.F16
    return np.dtype(np.float16 if f16 else np.float32)


def _private(path: Path) -> IO[bytes]:
    """A file opened for writing, owner-only from its first byte."""
    return os.fdopen(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "wb")


def _save(path: Path, array: np.ndarray) -> None:
    with _private(path) as handle:
        np.save(handle, array, allow_pickle=False)


def write_seed(out: Path, space: VectorSpace, scopes: Iterable[tuple[str, Iterator[ExportedRecord]]]) -> dict[str, Any]:
    """Write the seed of ``scopes`` (scope key, its current records with vectors) to the
    new directory ``out``; the summary. Written beside it first and renamed into place, so
    a seed that is there is whole. A record whose vectors do not match its windows (none
    should) is left out: the new replica embeds it."""
    out = Path(out)
    if out.exists():
        raise FileExistsError(str(out))
    partial = out.with_name(out.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True, mode=0o700)
    dtype = storage_dtype()
    counts: dict[str, dict[str, int]] = {}
    left_out = 0
    try:
        for key, records in scopes:
            ids: list[bytes] = []
            digests: list[bytes] = []
            offsets = [0]
            with _private(partial / f"{key}.vectors") as rows:
                for record in records:
                    windows = passages(index_document(key, record.record_id, record.payload).semantic_text())
                    block = np.asarray(record.vectors)
                    if block.ndim != 2 or block.shape != (len(windows), space.dim):
                        left_out += 1
                        continue
                    rows.write(np.ascontiguousarray(block, dtype=dtype).tobytes())
                    ids.append(record.record_id.encode("utf-8"))
                    digests.append(passages_digest(windows))
                    offsets.append(offsets[-1] + len(windows))
            _save(partial / f"{key}.ids.npy", np.array(ids, dtype=bytes) if ids else np.zeros(0, dtype="S1"))
            _save(
                partial / f"{key}.digests.npy",
                np.frombuffer(b"".join(digests), dtype=np.uint8).reshape(len(digests), DIGEST_BYTES),
            )
            _save(partial / f"{key}.offsets.npy", np.asarray(offsets, dtype=np.int64))
            counts[key] = {"records": len(ids), "passages": offsets[-1]}
        header = {
            "format": FORMAT,
            "encoder": space.encoder,
            "windowing": space.windowing,
            "dim": space.dim,
            "dtype": dtype.name,
            "scopes": counts,
        }
        with _private(partial / HEADER) as handle:
            handle.write(json.dumps(header, indent=2, sort_keys=True).encode())
        partial.rename(out)
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    return {
        "out": str(out),
        "encoder": space.encoder,
        "scopes": len(counts),
        "records": sum(c["records"] for c in counts.values()),
        "passages": sum(c["passages"] for c in counts.values()),
        "left_out": left_out,
    }


@dataclass
class SeedTally:
    """Documents a seeded warm-up took vectors for from the seed, and embedded itself."""

    seeded: int = 0
    embedded: int = 0

    def __post_init__(self) -> None:
        self._lock = threading.Lock()

    def add(self, seeded: int, embedded: int) -> None:
        with self._lock:
            self.seeded += seeded
            self.embedded += embedded


class _ScopeSeed:
    """One scope's rows of a seed: ids sorted once for lookups, vectors memory-mapped."""

    def __init__(self, root: Path, key: str, dim: int, dtype: np.dtype, records: int, passages_: int) -> None:
        ids = np.load(root / f"{key}.ids.npy", allow_pickle=False)
        self.digests = np.load(root / f"{key}.digests.npy", mmap_mode="r", allow_pickle=False)
        self.offsets = np.load(root / f"{key}.offsets.npy", allow_pickle=False)
        vectors_file = root / f"{key}.vectors"
        if (
            ids.dtype.kind != "S"
            or ids.shape != (records,)
            or self.digests.shape != (records, DIGEST_BYTES)
            or self.offsets.shape != (records + 1,)
            or int(self.offsets[-1]) != passages_
            or bool(np.any(np.diff(self.offsets) < 0))
            or vectors_file.stat().st_size != passages_ * dim * dtype.itemsize
        ):
            raise ValueError(f"seed files of scope {key} do not agree with {HEADER}")
        self.order = np.argsort(ids, kind="stable")
        self.sorted_ids = ids[self.order]
        self.vectors = (
            np.memmap(vectors_file, dtype=dtype, mode="r", shape=(passages_, dim))
            if passages_
            else np.zeros((0, dim), dtype=dtype)
        )

    def vectors_for(self, doc: IndexDocument) -> np.ndarray | None:
        """The document's passage vectors, if the seed holds them for exactly its windows."""
        rid = doc.record_id.encode("utf-8")
        at = int(np.searchsorted(self.sorted_ids, rid))
        if at >= len(self.sorted_ids) or self.sorted_ids[at] != rid:
            return None
        row = int(self.order[at])
        windows = passages(doc.semantic_text())
        start, end = int(self.offsets[row]), int(self.offsets[row + 1])
        if end - start != len(windows) or bytes(self.digests[row]) != passages_digest(windows):
            return None
        return np.asarray(self.vectors[start:end], dtype=np.float32)


class SeedVectors:
    """A seed opened for lookups (scopes loaded on first use). Open it with :meth:`open`."""

    def __init__(self, root: Path, header: dict[str, Any]) -> None:
        self.root = Path(root)
        self._dim = int(header["dim"])
        self._dtype = np.dtype(header["dtype"])
        self._counts: dict[str, dict[str, int]] = header["scopes"]
        self._scopes: dict[str, _ScopeSeed | None] = {}
        self._lock = threading.Lock()

    @property
    def records(self) -> int:
        return sum(int(c["records"]) for c in self._counts.values())

    @classmethod
    def open(cls, root: Path, space: VectorSpace) -> SeedVectors | None:
        """The seed at ``root``, or None, with a warning saying why, when it cannot stand
        in for vectors of ``space`` (unreadable, another encoder, windowing or dimension,
        or an encoder that names no model): the warm-up then embeds every record."""
        root = Path(root)
        try:
            header = json.loads((root / HEADER).read_text())
            seeded = VectorSpace(header["encoder"], header["windowing"], int(header["dim"]))
            dtype = np.dtype(header["dtype"])
            if header["format"] != FORMAT or dtype.kind != "f" or not isinstance(header["scopes"], dict):
                raise ValueError("not a seed of this format")
        except (OSError, ValueError, KeyError, TypeError) as exc:
            logger.warning(
                "seed vectors %s ignored (unreadable: %s): every record is embedded", root, type(exc).__name__
            )
            return None
        if space.encoder is None or seeded != space:
            logger.warning(
                "seed vectors %s ignored: made by encoder %s, windowing %s, %d dims; this replica: encoder %s,"
                " windowing %s, %d dims. Every record is embedded",
                root,
                seeded.encoder,
                seeded.windowing,
                seeded.dim,
                space.encoder or "(unnamed)",
                space.windowing,
                space.dim,
            )
            return None
        seed = cls(root, header)
        logger.info("seed vectors %s: %d records of %d scopes", root, seed.records, len(seed._counts))
        return seed

    def vectors_for(self, key: str, docs: Sequence[IndexDocument]) -> list[np.ndarray | None]:
        """Each document's passage vectors from the seed (None where it holds none that
        match the document's current passage texts)."""
        scope = self._scope(key)
        if scope is None:
            return [None] * len(docs)
        return [scope.vectors_for(doc) for doc in docs]

    def _scope(self, key: str) -> _ScopeSeed | None:
        with self._lock:
            if key in self._scopes:
                return self._scopes[key]
            counts = self._counts.get(key)
            scope = None
            if counts is not None:
                try:
                    scope = _ScopeSeed(
                        self.root, key, self._dim, self._dtype, int(counts["records"]), int(counts["passages"])
                    )
                except (OSError, ValueError, KeyError, TypeError) as exc:
                    logger.warning("seed vectors of scope %s ignored (%s): its records are embedded", key, exc)
            self._scopes[key] = scope
            return scope
