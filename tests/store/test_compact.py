"""Packed bodies: what is packed unpacks to the same object, smaller than its JSON, and
bytes packed with the earlier, larger window and hash still unpack."""

from __future__ import annotations

import zlib

import pytest

from engram.models import compact_json
from engram.service.store import compact
from engram.service.store.compact import PACKED_V1, CorruptPacked, pack, unpack


def _body(text: str) -> dict[str, object]:
    return {
        "payload": {
            "schema_version": 2,
            "purpose_ref": "purpose:ingest",
            "valid_time": {"t": 1_700_000_000_000},
            "components": [{"component_id": "c1", "kind": "fact", "text": text, "citation_ids": ["cit1"]}],
            "primary_component_id": "c1",
        },
        "evidence": {"evidence_ref": "ingest:beir:d1", "evidence_digest": "sha256:" + "cd" * 32},
        "trust": "operator-ingested",
        "decision_receipt_digest": "sha256:" + "01" * 32,
    }


@pytest.mark.parametrize("words", [1, 80, 4_000])  # a short body, a passage, one past the window
def test_a_packed_body_unpacks_to_itself_and_is_smaller_than_its_json(words: int) -> None:
    body = _body(" ".join(f"harbour{i % 97} pilot" for i in range(words)))
    packed = pack(body)
    assert packed[0] == PACKED_V1
    assert unpack(packed) == body
    assert len(packed) < len(compact_json.dumps(body, sort_keys=True)) / 2


def test_bytes_packed_with_the_largest_window_and_hash_still_unpack() -> None:
    body = _body("The tide tables for the pier change at the spring equinox.")
    deflate = zlib.compressobj(9, zlib.DEFLATED, -15, 9, zdict=compact._DICTIONARY_V1)
    earlier = bytes((PACKED_V1,)) + deflate.compress(compact_json.dumps(body, sort_keys=True)) + deflate.flush()
    assert unpack(earlier) == body


@pytest.mark.parametrize("data", [b"", b'{"a":1}', bytes((PACKED_V1,)) + b"\x00\x01", pack({"a": 1})[:-2]])
def test_bytes_that_are_not_a_packed_object_are_refused(data: bytes) -> None:
    with pytest.raises(CorruptPacked):
        unpack(data)
