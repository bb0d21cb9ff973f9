"""Sealed bodies: packed before sealing, and bodies sealed before that (plain JSON, or
zlib-compressed alone) still open."""

from __future__ import annotations

import json
import zlib
from pathlib import Path

import pytest

from engram.service.engine.sealing import COMPRESSED, BodyVault, KeyRing, SealBroken, new_data_key, seal
from engram.service.store.sqlite import SqliteStore

BODY = {
    "payload": {
        "components": [{"text": "the ledger service moves to serialisable isolation before the billing freeze " * 4}]
    },
    "authorization_receipt_digest": "sha256:" + "ab" * 32,
    "trust": "asserted",
}


@pytest.fixture
def vault(tmp_path: Path):
    store = SqliteStore(tmp_path / "engram.db")
    yield BodyVault(KeyRing(tmp_path / "keys"), store), store
    store.close()


def test_bodies_are_compressed_and_open_again(vault):
    bodies, store = vault
    plaintext = json.dumps(BODY, sort_keys=True, separators=(",", ":")).encode()
    with store.transaction() as tx:
        key_id, sealed = bodies.seal_json(tx, BODY, "aad")
    assert len(sealed) < len(plaintext)  # nonce and tag included
    assert bodies.open_json(key_id, sealed, "aad") == BODY
    with pytest.raises(SealBroken):
        bodies.open_json(key_id, sealed, "other aad")


@pytest.mark.parametrize(
    "legacy",
    [
        json.dumps(BODY).encode(),  # as sealed before compression
        COMPRESSED + zlib.compress(json.dumps(BODY, sort_keys=True).encode(), 6),  # zlib alone, before packing
    ],
)
def test_a_body_sealed_by_an_earlier_release_still_opens(vault, legacy):
    bodies, store = vault
    key_id, data_key = new_data_key()
    wrapped, kek_id = bodies.ring.wrap(data_key, key_id)
    with store.transaction() as tx:
        tx.put_key(key_id, wrapped, kek_id)
    assert bodies.open_json(key_id, seal(data_key, legacy, "aad"), "aad") == BODY


def test_packing_beats_zlib_alone(vault):
    bodies, store = vault
    with store.transaction() as tx:
        _, sealed = bodies.seal_json(tx, BODY, "aad")
    zlib_alone = COMPRESSED + zlib.compress(json.dumps(BODY, sort_keys=True, separators=(",", ":")).encode(), 6)
    assert len(sealed) - 28 < len(zlib_alone)  # less the nonce and the tag
