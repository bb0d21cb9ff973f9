"""A load's records cut into batches: fixed size, or ramped up to it (and down again at
the end, where the load's size is known) for a load written in a worker process, each
record keeping its source position."""

from __future__ import annotations

from engram.index_data.records import IngestRecord
from engram.index_data.writer import RAMP_FROM, chunks


def _records(n: int) -> list[IngestRecord]:
    return [IngestRecord(f"d{i}", f"note {i}", "kb") for i in range(n)]


def test_a_ramped_load_starts_small_and_doubles_up_to_the_batch_size() -> None:
    records = _records(RAMP_FROM * 15 + 3)
    sizes = [len(c) for c in chunks(records, RAMP_FROM * 4, ramp=True)]
    assert sizes == [RAMP_FROM, RAMP_FROM * 2, RAMP_FROM * 4, RAMP_FROM * 4, RAMP_FROM * 4, 3]


def test_every_record_keeps_its_position_ramped_or_not() -> None:
    records = _records(RAMP_FROM * 3 + 1)
    for ramp in (False, True):
        flat = [pair for chunk in chunks(records, RAMP_FROM * 2, ramp=ramp) for pair in chunk]
        assert flat == list(enumerate(records))


def test_batches_no_larger_than_the_ramps_start_are_not_ramped() -> None:
    sizes = [len(c) for c in chunks(_records(100), 7, ramp=True)]
    assert sizes == [7] * 14 + [2]


def test_a_ramped_load_of_known_size_ends_with_halving_chunks() -> None:
    records = _records(RAMP_FROM * 20 + 3)
    sizes = [len(c) for c in chunks(records, RAMP_FROM * 4, ramp=True, total=len(records))]
    assert sizes[:3] == [RAMP_FROM, RAMP_FROM * 2, RAMP_FROM * 4]
    tail = sizes[sizes.index(max(sizes)) :]
    assert tail == sorted(tail, reverse=True) and tail[-1] <= RAMP_FROM
    assert all(later >= RAMP_FROM and later * 2 >= earlier - 1 for earlier, later in zip(tail, tail[1:-1]))
    assert sum(sizes) == len(records)


def test_a_source_longer_than_its_stated_size_is_cut_whole() -> None:
    records = _records(RAMP_FROM * 6)
    flat = [pair for chunk in chunks(records, RAMP_FROM * 2, ramp=True, total=RAMP_FROM) for pair in chunk]
    assert flat == list(enumerate(records))
