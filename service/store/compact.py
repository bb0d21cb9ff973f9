"""Compact bytes for the JSON bodies the service keeps: journal event bodies and the
plaintext of sealed record and candidate bodies.

Why: per record, most stored bytes were the same field names, digest prefixes and fixed
values written out again on every row (a journal event of digests took about 600 bytes,
a sealed body's skeleton about 1,100 before compression). Deflate against a preset
dictionary of exactly those strings stores them as back-references from the first byte:
a journal event body shrinks to about 40% of its JSON, and a sealed body (compressed
alone before) by about a quarter more.

The dictionary is part of the stored format. A packed value starts with a byte naming
its dictionary (`PACKED_V1`, which JSON text never starts with), and a released
dictionary never changes: a new one gets a new byte, and this module keeps reading
every byte it ever wrote.
"""

from __future__ import annotations

import zlib
from typing import Any

import orjson

from engram.models import compact_json
from engram.models.errors import EngramError


class CorruptPacked(EngramError, ValueError):
    """Bytes that claim to be packed but do not unpack to a JSON object."""


#: First byte of a value packed against the version-1 dictionary.
PACKED_V1 = 0x02

_DICTIONARY_V1 = "".join(
    (
        # sealed bodies (capture's candidate body; an accepted record's body)
        '{"accepted_at":"20","actor":{"agent_id":"","principal":"","session":""},',
        '"authorization_receipt":{"agent_id":"","granted":true,"issued_at":"20","principal":"","purpose":"",'
        '"receipt_digest":"sha256:","session":"","tenant":"","tool":"engram_memory_capture","workspace":""},',
        '"authorization_receipt_digest":"sha256:","decision_receipt_digest":"sha256:",',
        '"evidence":{"attestation":"","citation_ids":["cit1"],"evidence_digest":"sha256:","evidence_ref":""},',
        '"payload":{"citations":[{"citation_id":"","content_digest":"sha256:","locator":{"scheme":"uri",'
        '"value":"https://"},"observed_at":"20","source_ref":""}],',
        '"components":[{"citation_ids":[""],"component_id":"","kind":"context","text":""},',
        '{"kind":"decision"},{"kind":"evidence"}],"primary_component_id":"",',
        '"primary_event":{"at":,"citation_id":"","type_ref":"event:"},"purpose_ref":"purpose:",',
        '"reconciliation":{"family_refs":[""]},"schema_version":2,"valid_time":{"t":,"t_end":}},',
        '"recorded_at":"20","retention":{"derivative_rule":"retain","expires_at":"20"},',
        '{"derivative_rule":"make-ineligible"},"trust":"asserted"},"trust":"operator-ingested"}',
        # journal event bodies
        '{"decision_receipt":{"decision":"accept","issued_at":"20","policy_id":"","policy_version":"",',
        '"receipt_digest":"sha256:","record_digest":"sha256:"},"principal":""}',
        '{"from_state":"accepted_current","operation":"","principal":"operator","reason_ref":"reason:",',
        '"to_state":""}',
        '{"authorization_receipt_digest":"sha256:","evidence_digest":"sha256:","payload_digest":"sha256:",',
        '"principal":"","record_digest":"sha256:"}',
        '{"authorization_receipt_digest":"sha256:","candidate_id":"cand_","decision_receipt_digest":"sha256:",',
        '"evidence_digest":"sha256:","payload_digest":"sha256:","record_digest":"sha256:","trust":"asserted"}',
        '"candidate_id":"ingest_","trust":"operator-ingested"}',
    )
).encode()


#: Deflate's window and hash sizes for packing (raw deflate, so any window up to the
#: 32 KiB that :func:`unpack` opens reads back). A 16 KiB window holds the dictionary and
#: a body of 14 KiB; a body packs to the same size as with the largest window and hash
#: (measured on ingested bodies of 1.5 and 6.8 KB), and a compressor this size is made in
#: about a quarter of the time, which is most of what packing a body costs: two bodies a
#: record (its sealed body and its journal event) are packed on every write.
_WINDOW_BITS = 14
_MEMORY_LEVEL = 5


def pack(value: dict[str, Any]) -> bytes:
    """``value`` as compact JSON deflated against the current dictionary."""
    text = compact_json.dumps(value, sort_keys=True)
    deflate = zlib.compressobj(9, zlib.DEFLATED, -_WINDOW_BITS, _MEMORY_LEVEL, zdict=_DICTIONARY_V1)
    return bytes((PACKED_V1,)) + deflate.compress(text) + deflate.flush()


def is_packed(data: bytes) -> bool:
    return data[:1] == bytes((PACKED_V1,))


def unpack(data: bytes) -> dict[str, Any]:
    """The object :func:`pack` packed; CorruptPacked when the bytes are not one."""
    if not is_packed(data):
        raise CorruptPacked("no dictionary marker")
    try:
        inflate = zlib.decompressobj(-15, zdict=_DICTIONARY_V1)
        text = inflate.decompress(data[1:]) + inflate.flush()
        if not inflate.eof:
            raise CorruptPacked("truncated")
        value = orjson.loads(text)
    except (zlib.error, ValueError) as exc:
        raise CorruptPacked(str(exc)) from exc
    if not isinstance(value, dict):
        raise CorruptPacked("not an object")
    return value
