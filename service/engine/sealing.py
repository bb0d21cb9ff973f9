"""Envelope encryption: each sealed body has its own data key, wrapped by the KEK.

Destroying a body is destroying its data key (crypto-shredding): once the wrapped key
row is gone from the database and the WAL, the sealed bytes can never be opened again,
wherever a copy of them lingers. The key-encryption key is a 0600 file in the data
directory, created on first start and rotatable by the operator.

Bodies are compressed before sealing, which is most of a record's bytes in the store:
packed against the store's dictionary of the fields every body repeats
(:mod:`service.store.compact`). The plaintext starts with a marker byte that JSON never
starts with, so bodies sealed earlier (plain JSON, or zlib alone) still open.
"""

from __future__ import annotations

import json
import os
import secrets
import threading
import time
import zlib
from collections.abc import Sequence
from pathlib import Path

from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from engram.models.digests import DigestKind, digest
from engram.models.errors import EngramError
from engram.models.scope import Scope
from engram.ranking.storage import sync_directory
from engram.service.store import compact
from engram.service.store.base import Store


class SealBroken(EngramError):
    """The key is gone or the ciphertext does not authenticate."""


NONCE_BYTES = 12
#: First plaintext byte of a body sealed zlib-compressed alone (before packing; an
#: uncompressed one starts with "{", a packed one with compact.PACKED_V1).
COMPRESSED = b"\x01"
REWRAP_BATCH = 1000
#: The shred ledger: one JSON line per body whose key a forget or withdraw destroyed.
#: It lives beside the KEKs, never in a backup's database; a restore applies it, and
#: every open re-applies the entries a database restored from before them lacks.
SHRED_LEDGER = "shreds.jsonl"
#: On a store several replicas share, how long an older KEK outlives its successor. A
#: replica picks a newer KEK up on its next wrap (see `KeyRing.wrap`), but a transaction
#: that wrapped a data key just before may commit later, unseen by the rotating replica:
#: the grace outlasts the longest call deadline (600 s), so no such key is left behind.
SHARED_RETIRE_GRACE_S = 900.0


class KeyRing:
    """The active KEK (and any older ones still wrapping keys during rotation).

    ``retire_grace_s``: how long an older KEK is kept after a newer one became active
    (0 for a store only this process writes; `SHARED_RETIRE_GRACE_S` for a shared one)."""

    def __init__(self, key_dir: Path, *, retire_grace_s: float = 0.0) -> None:
        self.key_dir = key_dir
        self.retire_grace_s = retire_grace_s
        key_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        if not self._kek_files():
            self._write_kek(self._next_id(), AESGCM.generate_key(bit_length=256))
        self._keks = {path.stem: path.read_bytes() for path in self._kek_files()}
        # Wraps (each syncing with the directory), a rotation's retire and unwraps adopting a
        # KEK change the map from different threads: changes and walks over it hold this.
        self._keks_lock = threading.Lock()

    def _kek_files(self) -> list[Path]:
        return sorted(self.key_dir.glob("kek-*.key"))

    def _next_id(self) -> str:
        return f"kek-{time.time_ns():020d}"

    def _write_kek(self, kek_id: str, material: bytes) -> None:
        """Write-then-rename: a KEK file is whole or absent, whenever the process dies."""
        path = self.key_dir / f"{kek_id}.key"
        partial = path.with_name(path.name + ".partial")
        partial.unlink(missing_ok=True)
        fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as handle:
            handle.write(material)
            handle.flush()
            os.fsync(handle.fileno())
        os.rename(partial, path)
        sync_directory(self.key_dir)

    @property
    def active_id(self) -> str:
        with self._keks_lock:
            return max(self._keks)

    def _sync(self) -> None:
        """Follow the key directory that other processes share (replicas of one
        database): adopt a KEK another replica's rotation wrote, so nothing is wrapped
        under a KEK already replaced, and forget one it retired (no key needs it)."""
        with self._keks_lock:  # list the directory inside: a rotation writes, then adds
            on_disk = {path.stem: path for path in self._kek_files()}
            for kek_id, path in on_disk.items():
                if kek_id not in self._keks:
                    self._keks[kek_id] = path.read_bytes()
            for kek_id in [k for k in self._keks if k not in on_disk]:
                del self._keks[kek_id]

    def wrap(self, data_key: bytes, key_id: str) -> tuple[bytes, str]:
        wrapped, kek_id = self.wrap_many([(data_key, key_id)])
        return wrapped[0], kek_id

    def wrap_many(self, keys: Sequence[tuple[bytes, str]]) -> tuple[list[bytes], str]:
        """Wrap each (data key, key id) under the active KEK, the key directory synced
        once for them all (a batch of records seals under one KEK)."""
        self._sync()
        kek_id = self.active_id
        return [self._wrap_under(kek_id, data_key, key_id) for data_key, key_id in keys], kek_id

    def _wrap_under(self, kek_id: str, data_key: bytes, key_id: str) -> bytes:
        nonce = secrets.token_bytes(NONCE_BYTES)
        return nonce + AESGCM(self._keks[kek_id]).encrypt(nonce, data_key, key_id.encode())

    def unwrap(self, wrapped: bytes, kek_id: str, key_id: str) -> bytes:
        kek = self._keks.get(kek_id)
        if kek is None:
            path = self.key_dir / f"{kek_id}.key"
            if not path.is_file():
                raise SealBroken()
            kek = path.read_bytes()
            with self._keks_lock:
                self._keks[kek_id] = kek
        try:
            return AESGCM(kek).decrypt(wrapped[:NONCE_BYTES], wrapped[NONCE_BYTES:], key_id.encode())
        except Exception as exc:  # InvalidTag and malformed input alike
            raise SealBroken() from exc

    def rotate(self, store: Store) -> str:
        """Make a fresh KEK active, then rewrap every data key under it (see
        `finish_rotation`). Crash-safe at every point: the new KEK file is durable before
        any key uses it, and an older KEK file is deleted only once no key needs it, so
        an interrupted rotation leaves every key openable and the next open resumes it."""
        new_id = self._next_id()
        material = AESGCM.generate_key(bit_length=256)
        self._write_kek(new_id, material)
        with self._keks_lock:
            self._keks[new_id] = material
        self.finish_rotation(store)
        return new_id

    def pending_rotation(self) -> bool:
        """Whether older KEK files are still kept (a rotation has not finished)."""
        self._sync()
        return len(self._keks) > 1

    def retire_due(self) -> bool:
        """Whether the active KEK has been active longer than the retire grace."""
        made_ns = int(self.active_id.removeprefix("kek-"))
        return time.time_ns() - made_ns >= self.retire_grace_s * 1e9

    def finish_rotation(self, store: Store) -> int:
        """Rewrap every data key not under the active KEK, in batches, then delete the
        KEK files no key uses any more. Idempotent and resumable; returns how many keys
        were rewrapped. Keys that cannot be opened keep their KEK file (nothing is lost)."""
        active = self.active_id
        rewrapped = 0
        stuck: set[str] = set()
        while True:
            stale = [r for r in store.all_wrapped_keys() if r[2] != active and r[0] not in stuck]
            if not stale:
                break
            for start in range(0, len(stale), REWRAP_BATCH):
                rows = []
                for key_id, wrapped, kek_id in stale[start : start + REWRAP_BATCH]:
                    try:
                        data_key = self.unwrap(wrapped, kek_id, key_id)
                    except SealBroken:
                        stuck.add(key_id)
                        continue
                    rows.append((key_id, self._wrap_under(active, data_key, key_id), active))
                store.rewrap_keys(rows)
                rewrapped += len(rows)
        if not self.retire_due():
            return rewrapped  # a later finish (next open, the replica's follower) retires them
        # Inside a write transaction (and, on a shared store, past the grace), no writer
        # that wrapped under an older KEK before it stopped being active can still be
        # uncommitted: what is read now is final.
        with store.transaction():
            needed = {kek_id for _, _, kek_id in store.all_wrapped_keys()} | {active}
            with self._keks_lock:
                for old in [k for k in self._keks if k not in needed]:
                    (self.key_dir / f"{old}.key").unlink(missing_ok=True)
                    del self._keks[old]
            sync_directory(self.key_dir)
        return rewrapped


def shred_digest(value: object) -> str:
    """How the ledger names a scope or a subject: a digest, so the ledger holds no ids."""
    return digest(DigestKind.SHRED, value)


#: A journal event's place: (cursor, event digest).
Position = tuple[int, str]


def record_shred(
    key_dir: Path,
    kind: str,
    scope: Scope,
    subject: str,
    *,
    made: Position | None = None,
    ended: Position | None = None,
) -> None:
    """Append one shred entry durably (fsync). It names the scope and subject by digest
    only (see `shred_digest`). Written once before the destroying transaction commits
    (no positions), and once after its commit returned, with the journal positions of
    an event that exists with the subject (``made``: the capture or acceptance) and of
    the one that ended it (``ended``): an open checks those by primary key, and a store
    whose journal holds ``made`` but not ``ended`` was restored from before the commit
    (`transitions.reapply_shreds`)."""
    entry: dict[str, object] = {"kind": kind, "scope": shred_digest(list(scope)), "subject": shred_digest(subject)}
    if made is not None:
        entry["made"] = list(made)
    if ended is not None:
        entry["ended"] = list(ended)
    line = json.dumps(entry, separators=(",", ":"))
    fd = os.open(key_dir / SHRED_LEDGER, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        os.write(fd, line.encode() + b"\n")
        os.fsync(fd)
    finally:
        os.close(fd)


def shred_entries(key_dir: Path) -> list[dict]:
    """Every entry of the ledger (a torn last line, from a crash mid-append, is skipped)."""
    path = key_dir / SHRED_LEDGER
    if not path.exists():
        return []
    out = []
    for line in path.read_bytes().splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            continue
    return out


def shred_positioned(key_dir: Path, kind: str, scope: Scope, subject: str) -> bool | None:
    """Whether the ledger holds an entry with journal positions for this subject: None
    when it holds no entry of it at all."""
    named = (kind, shred_digest(list(scope)), shred_digest(subject))
    mine = [e for e in shred_entries(key_dir) if (e["kind"], e["scope"], e["subject"]) == named]
    return any("ended" in e for e in mine) if mine else None


def copy_key_dir(source: Path, dest: Path) -> None:
    """Copy KEK files and the shred ledger into `dest` (created 0700, files 0600); the
    ledgers of both are merged, so no shred entry is ever dropped."""
    dest.mkdir(parents=True, exist_ok=True, mode=0o700)
    for path in sorted(source.glob("kek-*.key")):
        target = dest / path.name
        if not target.exists():
            fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as handle:
                handle.write(path.read_bytes())
                handle.flush()
                os.fsync(handle.fileno())
    known = {json.dumps(e, sort_keys=True) for e in shred_entries(dest)}
    fresh = [e for e in shred_entries(source) if json.dumps(e, sort_keys=True) not in known]
    if fresh:
        fd = os.open(dest / SHRED_LEDGER, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            os.write(fd, b"".join(json.dumps(e, separators=(",", ":")).encode() + b"\n" for e in fresh))
            os.fsync(fd)
        finally:
            os.close(fd)
    sync_directory(dest)


def new_data_key() -> tuple[str, bytes]:
    return "key_" + secrets.token_hex(16), AESGCM.generate_key(bit_length=256)


def seal(data_key: bytes, plaintext: bytes, aad: str) -> bytes:
    nonce = secrets.token_bytes(NONCE_BYTES)
    return nonce + AESGCM(data_key).encrypt(nonce, plaintext, aad.encode())


def open_sealed(data_key: bytes, sealed: bytes, aad: str) -> bytes:
    try:
        return AESGCM(data_key).decrypt(sealed[:NONCE_BYTES], sealed[NONCE_BYTES:], aad.encode())
    except Exception as exc:
        raise SealBroken() from exc


class BodyVault:
    """Seals and opens JSON bodies, each under its own wrapped data key."""

    def __init__(self, ring: KeyRing, store: Store) -> None:
        self.ring = ring
        self.store = store

    def seal_json(self, tx: object, body: dict, aad: str) -> tuple[str, bytes]:
        """Seal `body` under a fresh data key whose wrapped form joins transaction `tx`."""
        return self.seal_many(tx, [(body, aad)])[0]

    def seal_many(self, tx: object, bodies: Sequence[tuple[dict, str]]) -> list[tuple[str, bytes]]:
        """``seal_json`` of each (body, aad): each body under its own fresh data key, the
        wrapped keys joining `tx` together. Returns (key id, sealed bytes) in order."""
        keys = [new_data_key() for _ in bodies]
        wrapped, kek_id = self.ring.wrap_many([(data_key, key_id) for key_id, data_key in keys])
        tx.put_keys([(key_id, w, kek_id) for (key_id, _), w in zip(keys, wrapped)])  # type: ignore[attr-defined]
        return [
            (key_id, seal(data_key, compact.pack(body), aad)) for (key_id, data_key), (body, aad) in zip(keys, bodies)
        ]

    def open_json(
        self, key_id: str | None, sealed: bytes | None, aad: str, *, wrapped: tuple[bytes, str] | None = None
    ) -> dict:
        """Open a sealed body. ``wrapped``: its data key as read with the row (wrapped bytes,
        KEK id), saving a read of the store; without it the key is read here."""
        if key_id is None or sealed is None:
            raise SealBroken()
        found = wrapped if wrapped is not None else self.store.wrapped_key(key_id)
        if found is None:
            raise SealBroken()
        data_key = self.ring.unwrap(found[0], found[1], key_id)
        plaintext = open_sealed(data_key, sealed, aad)
        if compact.is_packed(plaintext):
            try:
                return compact.unpack(plaintext)
            except compact.CorruptPacked as exc:  # authenticated yet malformed: treat as broken
                raise SealBroken() from exc
        if plaintext[:1] == COMPRESSED:
            try:
                plaintext = zlib.decompress(plaintext[1:])
            except zlib.error as exc:  # authenticated yet malformed: treat as broken
                raise SealBroken() from exc
        return json.loads(plaintext)
