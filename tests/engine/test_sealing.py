"""Sealed bodies: compressed before sealing, and bodies sealed before that still open."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from service.engine.sealing import BodyVault, KeyRing, SealBroken, new_data_key, seal
from service.store.sqlite import SqliteStore

BODY = {"payload": {"components": [{"text": "the ledger service moves to serialisable "
                                            "isolation before the billing freeze " * 4}]},
        "authorization_receipt_digest": "sha256:" + "ab" * 32, "trust": "asserted"}


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


def test_a_body_sealed_uncompressed_still_opens(vault):
    bodies, store = vault
    key_id, data_key = new_data_key()
    wrapped, kek_id = bodies.ring.wrap(data_key, key_id)
    with store.transaction() as tx:
        tx.put_key(key_id, wrapped, kek_id)
    legacy = seal(data_key, json.dumps(BODY).encode(), "aad")  # as sealed before compression
    assert bodies.open_json(key_id, legacy, "aad") == BODY
