"""A scope's passage vectors at full precision, on disk: one fixed-size row per label.

Why on disk: the graph a semantic search walks holds each vector only as a compact code
(:mod:`ranking.semantic`), so that a scope of millions of passages fits in memory; the
walk's candidates are then scored exactly from these rows. Rows are read back with one
positioned read (``os.pread``) per run of consecutive labels: what is read that way
stays in the kernel's page cache, shared and reclaimable, where memory-mapped pages a
process touched would count in its resident memory and grow with every search (measured:
``docs/results/semantic-engine.md``). A small file (at most :data:`MAP_BYTES`: a
scope small enough to be scanned) is the exception, read through a memory map: a search
of it reads hundreds of rows a few rows apart, where a system call per run cost more
than the lookups, and what stays resident is at most the small file, in file-backed pages
the kernel may reclaim. The same rows serve every other exact read: the similarities of
lexical-only candidates, purges and rebuilds, exports.

Layout: ``rows-<generation>.f16`` (or ``.f32``) holds label L's vector at byte L x the
row size. Labels are handed out in order and never reused, so applying appends. The file
changes in place only past what the last checkpoint covers: a checkpoint fsyncs it and
records, in the scope's meta.json, its row count and a sha256 per block of
:data:`BLOCK_ROWS` rows (only blocks written since the previous checkpoint are hashed
again). Opening verifies every block and cuts off rows past the count (appended after
the checkpoint, before a crash). A purge writes a new generation that holds the rows
live when it began only (every other row zero; rows of records hidden while it ran go
at their own purge); once meta.json names it, the old one is deleted.
"""

from __future__ import annotations

import hashlib
import mmap
import os
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np

from engram.ranking.native import numkong
from engram.ranking.storage import atomic_write

#: Rows hashed together: a checkpoint re-hashes only the blocks written since the last.
BLOCK_ROWS = 1 << 16
#: Rows read at a time by a rewrite (a few MiB, whatever the scope's size).
READ_ROWS = 8_192
#: A file of at most this many bytes is read through a memory map: 16 MiB holds the
#: 15,000 float16 rows of the largest scope the shipped profile scans.
MAP_BYTES = 16 << 20


class VectorRows:
    """One generation's rows file, open for positioned reads and appends (reads may run
    in parallel; writes are the caller's to serialise with them)."""

    def __init__(self, path: Path, dim: int, dtype: np.dtype, count: int, hashes: Sequence[str]) -> None:
        self.path = path
        self.dim = dim
        self.dtype = np.dtype(dtype)
        self.row_bytes = dim * self.dtype.itemsize
        self.count = count  # rows written (labels below it have a row, perhaps zero)
        self._hashes = list(hashes)  # sha256 of each block, as far as ``_hashed`` rows
        self._hashed = count
        self._fd = os.open(path, os.O_RDWR)
        self._mapped: np.ndarray | None = None  # the file's rows through a memory map

    @classmethod
    def create(cls, path: Path, dim: int, dtype: np.dtype) -> VectorRows:
        """An empty rows file at ``path`` (replacing any file there)."""
        path.parent.mkdir(parents=True, exist_ok=True)
        os.close(os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600))
        return cls(path, dim, dtype, 0, [])

    @classmethod
    def open_saved(cls, path: Path, dim: int, dtype: np.dtype, count: int, hashes: Sequence[str]) -> VectorRows:
        """The file as a checkpoint left it: rows past ``count`` are cut off, and every
        block must match its hash. Raises ValueError when it does not (or is short)."""
        rows = cls(path, dim, dtype, count, hashes)
        try:
            if os.fstat(rows._fd).st_size < count * rows.row_bytes:
                raise ValueError("vector rows file shorter than its checkpoint")
            os.ftruncate(rows._fd, count * rows.row_bytes)
            if rows._block_hashes(0) != list(hashes):
                raise ValueError("vector rows do not match their checksums")
        except BaseException:
            rows.close()
            raise
        return rows

    def rewritten(self, path: Path, live: np.ndarray, count: int | None = None) -> VectorRows:
        """A new file at ``path`` with the same row count (or the first ``count`` rows:
        a copy taken while rows are appended past them), holding the rows of the
        ``live`` labels (ascending) and zeros everywhere else (written through a
        temporary file; its hashes are computed by the next :meth:`sync`)."""
        upto = self.count if count is None else count

        def write(tmp: Path) -> None:
            with open(tmp, "wb") as out:
                for first, block in self.chunks(upto=upto):
                    keep = live[np.searchsorted(live, first) : np.searchsorted(live, first + len(block))] - first
                    cleared = np.zeros_like(block)
                    cleared[keep] = block[keep]
                    out.write(cleared.tobytes())

        atomic_write(path, write)
        fresh = VectorRows(path, self.dim, self.dtype, upto, [])
        fresh._hashed = 0
        return fresh

    # -- reading ----------------------------------------------------------------------

    def read(self, labels: Sequence[int] | np.ndarray) -> np.ndarray:
        """The rows of ``labels`` (each below :attr:`count`) as float32, in order: one
        read per run of consecutive labels."""
        wanted = np.asarray(labels, dtype=np.int64).reshape(-1)
        if not len(wanted):
            return np.zeros((0, self.dim), np.float32)
        if self.count * self.row_bytes <= MAP_BYTES:
            if wanted.max() >= self.count:
                raise ValueError("vector rows file is shorter than the labels read")
            return _float32(self._map()[wanted])
        self._mapped = None  # grown past the mapped size: positioned reads from now on
        starts = np.flatnonzero(np.diff(wanted, prepend=wanted[0] - 2) != 1)
        lengths = np.diff(starts, append=len(wanted))
        size, fd = self.row_bytes, self._fd
        data = b"".join(
            os.pread(fd, n * size, first * size) for first, n in zip(wanted[starts].tolist(), lengths.tolist())
        )
        if len(data) != len(wanted) * size:
            raise ValueError("vector rows file is shorter than the labels read")
        return _float32(np.frombuffer(data, self.dtype).reshape(len(wanted), self.dim))

    def _map(self) -> np.ndarray:
        """The rows through a memory map of the file, mapped again once rows were added
        past it (a map sees every write within it: both are the kernel's page cache)."""
        mapped = self._mapped
        if mapped is None or len(mapped) < self.count:
            data = mmap.mmap(self._fd, self.count * self.row_bytes, prot=mmap.PROT_READ)
            mapped = np.frombuffer(data, self.dtype).reshape(self.count, self.dim)
            self._mapped = mapped  # an earlier map is unmapped once no read holds it
        return mapped

    def chunks(self, rows: int = READ_ROWS, upto: int | None = None) -> Iterator[tuple[int, np.ndarray]]:
        """(first label, rows in the stored type) over the whole file (or its first
        ``upto`` rows), in order."""
        end = self.count if upto is None else upto
        for first in range(0, end, rows):
            n = min(rows, end - first)
            data = os.pread(self._fd, n * self.row_bytes, first * self.row_bytes)
            if len(data) != n * self.row_bytes:
                raise ValueError("vector rows file is shorter than its row count")
            yield first, np.frombuffer(data, self.dtype).reshape(n, self.dim)

    # -- writing ----------------------------------------------------------------------

    def write(self, first: int, rows: np.ndarray) -> None:
        """Write ``rows`` at labels ``first`` onwards (not durable until :meth:`sync`)."""
        data = np.ascontiguousarray(rows, dtype=self.dtype).reshape(-1, self.dim)
        if not len(data):
            return
        os.pwrite(self._fd, data.tobytes(), first * self.row_bytes)
        self.count = max(self.count, first + len(data))
        self._hashed = min(self._hashed, first)

    def extend_to(self, count: int) -> None:
        """Hold at least ``count`` rows, the new ones zero (labels handed out without a
        row of their own: retired before the file was written)."""
        if count > self.count:
            os.ftruncate(self._fd, count * self.row_bytes)
            self._hashed = min(self._hashed, self.count)
            self.count = count

    def sync(self) -> list[str]:
        """Make every row written durable; the hash of each block (for meta.json)."""
        os.fsync(self._fd)
        block = self._hashed // BLOCK_ROWS
        self._hashes[block:] = self._block_hashes(block)
        self._hashed = self.count
        return list(self._hashes)

    def close(self) -> None:
        self._mapped = None
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def _block_hashes(self, first_block: int) -> list[str]:
        """sha256 of each block from ``first_block`` on, as the file holds them now."""
        hashes = []
        for start in range(first_block * BLOCK_ROWS, self.count, BLOCK_ROWS):
            digest = hashlib.sha256()
            end = min(start + BLOCK_ROWS, self.count) * self.row_bytes
            offset = start * self.row_bytes
            while offset < end:
                data = os.pread(self._fd, min(1 << 22, end - offset), offset)
                if not data:
                    raise ValueError("vector rows file is shorter than its row count")
                digest.update(data)
                offset += len(data)
            hashes.append(digest.hexdigest())
        return hashes


def _float32(rows: np.ndarray) -> np.ndarray:
    """``rows`` as float32. A float16 row is widened by NumKong (the SIMD kernels usearch
    computes with): numpy's float16 cast is scalar code, several times the cost
    (docs/results/semantic-engine.md); the widening is exact either way."""
    if rows.dtype == np.float16:
        return np.asarray(numkong().astype(rows, "float32"))
    return rows.astype(np.float32)
