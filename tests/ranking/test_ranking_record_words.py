"""Record ids packed into four u64 words: exact round trips, and only for canonical ids."""

from __future__ import annotations

import base64
import hashlib

from hypothesis import given, settings
from hypothesis import strategies as st

from engram.models.digests import record_id_for
from engram.ranking import record_words


@settings(deadline=None)  # a stall on a loaded machine is no failure of the code
@given(st.binary(min_size=32, max_size=32))
def test_every_service_record_id_round_trips(raw: bytes):
    record_id = record_id_for("sha256:" + raw.hex())
    words = record_words.pack(record_id)
    assert words is not None and all(0 <= w < 2**64 for w in words)
    assert record_words.unpack(words) == record_id


def test_ids_not_in_canonical_form_do_not_pack():
    good = record_id_for("sha256:" + hashlib.sha256(b"x").hexdigest())
    tail = good[-1]
    # The last base32 character carries 4 padding bits: a different character that
    # decodes to the same bytes is not the canonical spelling and must not pack.
    alias = good[:-1] + next(
        c
        for c in "abcdefghijklmnopqrstuvwxyz234567"
        if c != tail
        and base64.b32decode((good[4:-1] + c).upper() + "====") == base64.b32decode(good[4:].upper() + "====")
    )
    for other in ("r1", "mem_", "mem_abc", good.upper(), good + "a", good[:-1], "rec_" + good[4:], alias):
        assert record_words.pack(other) is None, other
    assert record_words.pack(good) is not None


@settings(deadline=None)
@given(st.lists(st.tuples(*[st.integers(0, 2**64 - 1)] * 4), max_size=20))
def test_unpack_many_agrees_with_unpack(rows: list[tuple[int, int, int, int]]):
    assert record_words.unpack_many(rows) == [record_words.unpack(r) for r in rows]
