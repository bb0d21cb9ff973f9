"""Crypto-shredding and physical purge, checked by scanning every byte of the data dir.

After withdraw (key_destruction complete) and after forget (projection_invalidation
complete), nothing of the content survives anywhere under the data directory (SQLite
database and WAL, lexical index segments, vector files, side files) nor in a backup made
afterwards: not its distinctive words, not its exact embedding rows, not its wrapped
data key, not its sealed body. Each scan has a positive control taken before the
destruction, so a scanner that cannot see a form is noticed rather than trusted.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import numpy as np
import pytest
from rel_support import (
    FIGURES,
    HashingTestEncoder,
    call,
    capture_args,
    confirmed_token,
    ctx_token,
    key,
    scan_dir,
    unique_token,
    value,
)

from engram.models.tools import CAPTURE, FORGET, REQUEST_ADMISSION, WITHDRAW
from engram.ranking import HYBRID_PROFILE
from engram.ranking.documents import passages
from engram.ranking.profiles import VectorStorage
from engram.service.engine.records import index_document, scope_key

pytestmark = pytest.mark.anyio
SCOPE = ("acme", "ws1")


def db_blobs(data_dir: Path, table: str, column: str, where: str, params: tuple) -> list[bytes]:
    db = sqlite3.connect(f"file:{data_dir / 'engram.db'}?mode=ro", uri=True)
    try:
        return [r[0] for r in db.execute(f"SELECT {column} FROM {table} WHERE {where}", params) if r[0] is not None]
    finally:
        db.close()


def scan_bytes(root: Path, needles: list[bytes]) -> list[str]:
    hits = []
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        data = path.read_bytes()
        hits += [f"{path.relative_to(root)}#{i}" for i, n in enumerate(needles) if n and n in data]
    return hits


def vector_rows(args: dict) -> list[bytes]:
    doc = index_document(scope_key(SCOPE), "mem_x", args["payload"])
    rows = HashingTestEncoder().encode(passages(doc.semantic_text()))
    assert HYBRID_PROFILE.config.semantic is not None
    stored = np.float16 if HYBRID_PROFILE.config.semantic.storage is VectorStorage.F16 else np.float32
    return [np.asarray(r, dtype=stored).tobytes() for r in rows]  # as the vector index stores them


def content(words: list[str]) -> dict:
    return capture_args(
        f"Shred test decision {words[0]} about {words[1]} storage",
        extra_text=f"context mentions {words[2]} and {words[3]}",
    )


async def test_withdraw_shreds_the_candidate(fresh):
    words = [unique_token() for _ in range(4)]
    args = content(words)
    tok = ctx_token()
    cid = value(await call(fresh.url, tok, "auto", CAPTURE, args))["candidate_id"]
    key_id = db_blobs(fresh.data_dir, "candidates", "key_id", "candidate_id=?", (cid,))[0]
    wrapped = db_blobs(fresh.data_dir, "keys", "wrapped", "key_id=?", (key_id,))
    sealed = db_blobs(fresh.data_dir, "candidates", "sealed", "candidate_id=?", (cid,))
    assert wrapped and sealed
    # Positive control: the scanner sees the key and the sealed body now; plaintext never.
    assert scan_bytes(fresh.data_dir, [wrapped[0][-32:], sealed[0][-64:]])
    assert scan_dir(fresh.data_dir, words) == {}

    wargs = {"candidate_id": cid, "idempotency_key": key("withdraw"), "reason_ref": "reason:shred"}
    out = value(await call(fresh.url, confirmed_token(WITHDRAW, wargs, cid), "legacy", WITHDRAW, wargs))
    assert out["key_destruction"] == "complete"
    backup = fresh.engine.operator.backup(fresh.data_dir.parent / "backup-after-withdraw")
    for root in (fresh.data_dir, backup):
        assert scan_bytes(root, [wrapped[0], wrapped[0][-32:], key_id.encode(), sealed[0][-64:]]) == [], root
        assert scan_dir(root, words) == {}
    FIGURES["shred: byte scans after withdraw/forget (leaks found: 0)"] += 2


async def test_forget_purges_every_projection_and_backup(fresh):
    words = [unique_token() for _ in range(4)]
    args = content(words)
    tok = ctx_token()
    cid = value(await call(fresh.url, tok, "auto", CAPTURE, args))["candidate_id"]
    adm = value(
        await call(fresh.url, tok, "auto", REQUEST_ADMISSION, {"candidate_id": cid, "idempotency_key": key("a")})
    )
    rid = adm["outcome"]["record_id"]
    key_id = db_blobs(fresh.data_dir, "records", "key_id", "record_id=?", (rid,))[0]
    wrapped = db_blobs(fresh.data_dir, "keys", "wrapped", "key_id=?", (key_id,))[0]
    sealed = db_blobs(fresh.data_dir, "records", "sealed", "record_id=?", (rid,))[0]
    rows = vector_rows(args)
    # Positive controls: the record is in the lexical index files (its words), in the
    # vector files (its exact embedding rows), and in the store (key, sealed body).
    before = scan_dir(fresh.data_dir / "index", words)
    assert before, "the scanner cannot see the lexical index: the scan below would prove nothing"
    assert scan_bytes(fresh.data_dir / "index", rows), "the scanner cannot see the vector rows"
    assert scan_bytes(fresh.data_dir, [wrapped[-32:], sealed[-64:]])
    # Another record stays, to show the purge is selective (and the index is not just empty).
    keep = [unique_token() for _ in range(4)]
    kcid = value(await call(fresh.url, tok, "auto", CAPTURE, content(keep)))["candidate_id"]
    value(await call(fresh.url, tok, "auto", REQUEST_ADMISSION, {"candidate_id": kcid, "idempotency_key": key("a")}))

    fargs = {"record_id": rid, "idempotency_key": key("forget"), "reason_ref": "reason:shred"}
    out = value(await call(fresh.url, confirmed_token(FORGET, fargs, rid), "legacy", FORGET, fargs))
    assert out["projection_invalidation"] == "complete"
    backup = fresh.engine.operator.backup(fresh.data_dir.parent / "backup-after-forget")
    for root in (fresh.data_dir, backup):
        assert scan_dir(root, words) == {}, f"content words survive in {root}"
        assert scan_bytes(root, rows) == [], f"embedding rows survive in {root}"
        assert scan_bytes(root, [wrapped, wrapped[-32:], key_id.encode(), sealed[-64:]]) == [], root
    assert scan_dir(fresh.data_dir / "index", keep[:2]), "the surviving record vanished from the index"
    FIGURES["shred: byte scans after withdraw/forget (leaks found: 0)"] += 2
