"""Which record each passage label of a scope's vector index belongs to, held compactly.

Why its own structure: the semantic channel keeps, beside the index, the map between
passage labels (the index's keys) and records, and each record's valid time. Held as
three Python dicts (label -> record id, record id -> list of labels, record id -> valid
time) cost a boxed int key and a dict slot per label, a list object per record, a boxed
valid time and two more dict slots: at a million records, a large share of the
service's resident memory (measured in docs/results/memory.md). Here the labels a
record gets are one contiguous run (the channel hands them out in order), so a record
maps to one packed int (first label and count); the owner of each label is a slot of one
list indexed by label (labels are dense, handed out from 0), and valid times are 64-bit
slots of one array, at the record's first label. A record whose labels are not one run
(never produced by this code, but readable from a file) keeps its list.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterator, Sequence

import numpy as np

_COUNT_BITS = 16  # a packed entry is first_label << 16 | passage count


class PassageLabels:
    """The label <-> record map and valid times of one scope."""

    def __init__(self) -> None:
        self._packed: dict[str, int] = {}  # record id -> first label << 16 | count
        self._scattered: dict[str, list[int]] = {}  # records whose labels are not one run
        self._owner: list[str | None] = []  # label -> record id (None: free or hidden)
        self._valid = array("q")  # label -> valid time ms (set at each record's first label)
        self._live = 0  # labels with an owner

    # -- reading ----------------------------------------------------------------------

    @property
    def next_label(self) -> int:
        """One past the highest label handed out (labels are never reused)."""
        return len(self._owner)

    @property
    def live_count(self) -> int:
        """Labels that belong to a record (passages in the index)."""
        return self._live

    @property
    def record_count(self) -> int:
        return len(self._packed) + len(self._scattered)

    def __contains__(self, record_id: str) -> bool:
        return record_id in self._packed or record_id in self._scattered

    def labels(self, record_id: str) -> Sequence[int] | None:
        """The record's labels in passage order (None: not held)."""
        packed = self._packed.get(record_id)
        if packed is not None:
            first = packed >> _COUNT_BITS
            return range(first, first + (packed & ((1 << _COUNT_BITS) - 1)))
        return self._scattered.get(record_id)

    def owner(self, label: int) -> str | None:
        """The record ``label`` belongs to (None: no such live label)."""
        return self._owner[label] if 0 <= label < len(self._owner) else None

    def owners(self, labels: Sequence[int]) -> list[str | None]:
        """:meth:`owner` of each label, in one pass (a search resolves a few hundred)."""
        owner, count = self._owner, len(self._owner)
        return [owner[label] if 0 <= label < count else None for label in labels]

    def valid_times(self, record_ids: Sequence[str]) -> list[int]:
        """:meth:`valid_time` of each held record."""
        packed, valid = self._packed, self._valid
        return [valid[packed[r] >> _COUNT_BITS] if r in packed else self.valid_time(r) for r in record_ids]

    def gather(self, record_ids: Sequence[str]) -> tuple[list[str], list[int], list[int]]:
        """The held records among ``record_ids`` (in order), each one's label count, and
        all their labels, record after record (what an exact per-record score reads)."""
        known: list[str] = []
        counts: list[int] = []
        labels: list[int] = []
        for record_id in record_ids:
            held = self.labels(record_id)
            if held:
                known.append(record_id)
                counts.append(len(held))
                labels.extend(held)
        return known, counts, labels

    def valid_time(self, record_id: str) -> int:
        labels = self.labels(record_id)
        if not labels:
            raise KeyError(record_id)
        return self._valid[labels[0]]

    def live_labels(self) -> np.ndarray:
        """Every live label, ascending (int64; no Python int per label)."""
        held = np.fromiter((owner is not None for owner in self._owner), dtype=bool, count=len(self._owner))
        return np.flatnonzero(held)

    def records(self) -> Iterator[tuple[str, list[int], int]]:
        """(record id, labels, valid time) of every record, in no particular order (a
        sort of a million ids would hold the GIL for most of a second in a save that
        otherwise lets searches run beside it)."""
        for record_id in [*self._packed, *self._scattered]:
            labels = self.labels(record_id)
            assert labels is not None
            yield record_id, list(labels), self._valid[labels[0]]

    def copy(self) -> PassageLabels:
        """An independent copy, taken in a few milliseconds (whole containers copied in
        C): what a save writes while the original goes on changing."""
        other = PassageLabels()
        other._packed = dict(self._packed)
        other._scattered = dict(self._scattered)  # its lists are replaced, never changed
        other._owner = list(self._owner)
        other._valid = array("q", self._valid)
        other._live = self._live
        return other

    # -- changing ---------------------------------------------------------------------

    def add(self, record_id: str, valid_time: int, count: int) -> range:
        """Hand ``count`` new labels to ``record_id`` (not held now) and return them."""
        first = len(self._owner)
        self._owner.extend([record_id] * count)
        self._valid.extend([0] * count)
        self._valid[first] = int(valid_time)
        self._live += count
        self._packed[record_id] = first << _COUNT_BITS | count
        return range(first, first + count)

    def restore(self, record_id: str, labels: Sequence[int], valid_time: int) -> None:
        """Hold ``record_id`` with the labels a saved file gave it."""
        labels = [int(label) for label in labels]
        if not labels:
            return
        top = max(labels) + 1
        if top > len(self._owner):
            self._owner.extend([None] * (top - len(self._owner)))
            self._valid.extend([0] * (top - len(self._valid)))
        record_id = _fresh(record_id)
        for label in labels:
            self._owner[label] = record_id
        self._valid[labels[0]] = int(valid_time)
        self._live += len(labels)
        first = labels[0]
        if labels == list(range(first, first + len(labels))) and len(labels) < 1 << _COUNT_BITS:
            self._packed[record_id] = first << _COUNT_BITS | len(labels)
        else:
            self._scattered[record_id] = labels

    def reserve(self, next_label: int) -> None:
        """Make sure labels below ``next_label`` are never handed out (a saved file's
        counter: labels of records hidden before the save stay retired)."""
        if next_label > len(self._owner):
            self._owner.extend([None] * (next_label - len(self._owner)))
            self._valid.extend([0] * (next_label - len(self._valid)))

    def remove(self, record_id: str) -> Sequence[int] | None:
        """Forget the record; its labels (None: it was not held)."""
        labels = self.labels(record_id)
        if labels is None:
            return None
        self._packed.pop(record_id, None)
        self._scattered.pop(record_id, None)
        for label in labels:
            self._owner[label] = None
        self._live -= len(labels)
        return labels


def _fresh(text: str) -> str:
    """A new string equal to ``text``. A saved file's record ids come out of the JSON
    parser interleaved in memory with the rows that carried them; kept as they are, each
    pins the parser's freed rows in place (the allocator returns memory to the system only
    by whole arenas), so the map keeps its own copies, allocated together."""
    return (text + " ")[:-1]
