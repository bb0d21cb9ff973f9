"""Search snapshots and the opaque page cursors that point into them.

The first page ranks once and pins the full ordered candidate list as a snapshot
(with its system_as_of and valid_as_of); later pages read the same list, so pages never
repeat or skip a record even while the index changes underneath. Each candidate is
still re-checked against the store when its page is served, so a record forgotten
after page one is never disclosed on page two. Snapshots live in memory for a bounded
time: a cursor whose snapshot is gone (expired, evicted, server restarted), that was
tampered with, or that is replayed with another query, parameters or scope is STALE_PAGE.

With replicas sharing a store, snapshots and the cursor MAC secret live in the store
too, so a cursor issued by one replica pages on any other without repeats or gaps. The
first page does not wait for that write: a writer thread stores the snapshot while the
page is re-checked and answered, and the replica keeps its own copy in memory, so its own
next pages read no row. Another replica that is asked for a snapshot too young to be
stored yet (its id carries its creation time) waits for it up to ``PENDING_WAIT_S``; one
that never arrives (the store failed, the replica was killed) is STALE_PAGE, as for a
snapshot gone any other way.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import logging
import secrets
import threading
import time
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import orjson

from engram.models import compact_json
from engram.models.codes import ContractError, ErrorCode
from engram.models.digests import DigestKind, digest
from engram.ranking import Contribution, Profile, RankedList, config_dict_digest
from engram.ranking.query_time import QueryTime, ValidTimeWindow
from engram.service.store.base import SharedStore

from .clock import instant, now_ms

logger = logging.getLogger("engram.paging")

SNAPSHOT_TTL_S = 900.0
SNAPSHOT_PREFIX = "snap_"
#: How long a replica waits for a snapshot another replica created this long ago or less
#: and is still storing (a store write takes milliseconds; this covers a slow one).
PENDING_WAIT_S = 2.0
PENDING_POLL_S = 0.02
#: Snapshots queued for the writer at most: past it a first page waits for a slot, so a
#: store slower than the searches holds searches back rather than filling memory.
MAX_PENDING_WRITES = 64
MAX_SNAPSHOTS = 512
#: One tenant's share of the cache: a tenant paging hard evicts its own oldest
#: snapshots, never every other tenant's (which would turn their cursors STALE_PAGE).
MAX_SNAPSHOTS_PER_TENANT = 64


@dataclass(frozen=True)
class SnapshotDigests:
    """The rank receipt's digests that are fixed for the life of a snapshot."""

    snapshot_digest: str
    candidate_ids_digest: str


@dataclass(frozen=True)
class Snapshot:
    snapshot_id: str
    tenant: str
    ranked: RankedList
    system_as_of: int
    valid_as_of_ms: int
    created: float
    # The digest of the configuration the list was ranked with: the profile's own, or,
    # read back from a shared store, that of the configuration as stored (which another
    # release may have written with other fields), so every page names the same one.
    profile_config_digest: str

    @cached_property
    def digests(self) -> SnapshotDigests:
        """Computed on first use, then shared by every budget pass and later page."""
        return SnapshotDigests(
            snapshot_digest=digest(
                DigestKind.SNAPSHOT,
                {
                    "snapshot_id": self.snapshot_id,
                    "ordered_ids": self.ranked.ordered_ids,
                    "system_as_of": str(self.system_as_of),
                    "valid_as_of": instant(self.valid_as_of_ms),
                    "profile_config_digest": self.profile_config_digest,
                },
            ),
            candidate_ids_digest=digest(DigestKind.IDS, sorted(self.ranked.candidate_ids)),
        )


@dataclass(frozen=True)
class PagePosition:
    snapshot_id: str
    position: int  # index into the snapshot's ordered candidates
    returned: int  # records disclosed on earlier pages (ranks continue from here)


def _created_ms(snapshot_id: str) -> int | None:
    """When the snapshot was created, from its id: ``snap_``, 12 hex digits of the
    creation time in ms, 24 of randomness (None: an id of an earlier release)."""
    stamp = snapshot_id[len(SNAPSHOT_PREFIX) : len(SNAPSHOT_PREFIX) + 12]
    if not snapshot_id.startswith(SNAPSHOT_PREFIX) or len(snapshot_id) != len(SNAPSHOT_PREFIX) + 36:
        return None
    try:
        return int(stamp, 16)
    except ValueError:
        return None


def _encode_snapshot(snap: Snapshot) -> str:
    ranked = snap.ranked
    window = ranked.query_time.window
    return compact_json.dumps(
        {
            "profile": ranked.profile.as_dict(),
            "channels": list(ranked.channels),
            "candidates": [list(c) for c in ranked.candidates],
            "candidate_ids": ranked.candidate_ids,
            "system_as_of": snap.system_as_of,
            "valid_as_of_ms": snap.valid_as_of_ms,
            "tenant": snap.tenant,
            "query_time": [ranked.query_time.asks_when, None if window is None else list(window)],
        }
    ).decode("utf-8")


def _decode_snapshot(snapshot_id: str, body: str) -> Snapshot:
    fields = orjson.loads(body)
    asks_when, window = fields.get("query_time") or (False, None)  # a snapshot from before query time
    ranked = RankedList(
        profile=Profile.from_dict(fields["profile"]),
        channels=tuple(fields["channels"]),
        candidates=[Contribution(*c) for c in fields["candidates"]],
        candidate_ids=fields["candidate_ids"],
        query_time=QueryTime(bool(asks_when), ValidTimeWindow(*window) if window else None),
    )
    return Snapshot(
        snapshot_id,
        str(fields.get("tenant", "")),
        ranked,
        fields["system_as_of"],
        fields["valid_as_of_ms"],
        time.monotonic(),
        config_dict_digest(fields["profile"]["config"]),
    )


class SnapshotCache:
    """In process memory, or in the store when replicas share it (`shared`)."""

    def __init__(self, shared: SharedStore | None = None) -> None:
        self._shared = shared
        self._secret = shared.shared_secret("paging-cursor-mac") if shared is not None else secrets.token_bytes(32)
        self._items: OrderedDict[str, Snapshot] = OrderedDict()
        self._lock = threading.Lock()
        self._writer = ThreadPoolExecutor(1, thread_name_prefix="engram-snapshots") if shared is not None else None
        self._pending = threading.BoundedSemaphore(MAX_PENDING_WRITES)

    def put(self, tenant: str, ranked: RankedList, system_as_of: int, valid_as_of_ms: int) -> Snapshot:
        created_ms = now_ms()
        snap = Snapshot(
            f"{SNAPSHOT_PREFIX}{created_ms:012x}{secrets.token_hex(12)}",
            tenant,
            ranked,
            system_as_of,
            valid_as_of_ms,
            time.monotonic(),
            ranked.profile.config_digest(),
        )
        with self._lock:
            own = [key for key, item in self._items.items() if item.tenant == tenant]
            for key in own[: max(0, len(own) - MAX_SNAPSHOTS_PER_TENANT + 1)]:
                del self._items[key]
            self._items[snap.snapshot_id] = snap
            while len(self._items) > MAX_SNAPSHOTS:
                self._items.popitem(last=False)
        if self._writer is not None:
            self._pending.acquire()
            self._writer.submit(self._store, snap, created_ms)
        return snap

    def _store(self, snap: Snapshot, created_ms: int) -> None:
        """Write ``snap`` to the shared store (on the writer thread)."""
        assert self._shared is not None
        try:
            self._shared.put_snapshot(
                snap.snapshot_id, _encode_snapshot(snap), created_ms, now_ms() - int(SNAPSHOT_TTL_S * 1000)
            )
        except Exception as exc:  # noqa: BLE001 - its cursor then reads STALE_PAGE elsewhere
            logger.warning(
                "paging snapshot not stored (%s): its cursor is STALE_PAGE on other replicas", type(exc).__name__
            )
        finally:
            self._pending.release()

    def get(self, snapshot_id: str) -> Snapshot:
        with self._lock:
            snap = self._items.get(snapshot_id)
            if snap is not None and time.monotonic() - snap.created > SNAPSHOT_TTL_S:
                del self._items[snapshot_id]
                snap = None
        if snap is not None:
            return snap
        if self._shared is None:
            raise ContractError(ErrorCode.STALE_PAGE)
        created_ms = _created_ms(snapshot_id)
        while True:
            found = self._shared.snapshot(snapshot_id)
            if found is not None:
                if now_ms() - found[1] > SNAPSHOT_TTL_S * 1000:
                    raise ContractError(ErrorCode.STALE_PAGE)
                return _decode_snapshot(snapshot_id, found[0])
            if created_ms is None or now_ms() - created_ms > PENDING_WAIT_S * 1000:
                raise ContractError(ErrorCode.STALE_PAGE)
            time.sleep(PENDING_POLL_S)  # another replica is still storing it

    def close(self) -> None:
        """Store the snapshots still being written (their cursors stay good elsewhere)."""
        if self._writer is not None:
            self._writer.shutdown(wait=True)

    def _mac(self, body: bytes) -> str:
        return hmac.new(self._secret, body, hashlib.sha256).hexdigest()[:32]

    def encode(self, position: PagePosition, binding: str) -> str:
        body = json.dumps(
            {"s": position.snapshot_id, "p": position.position, "r": position.returned, "b": binding},
            separators=(",", ":"),
        ).encode()
        return base64.urlsafe_b64encode(body).decode().rstrip("=") + "." + self._mac(body)

    def decode(self, cursor: str, binding: str) -> PagePosition:
        """The position a cursor names, if it is ours, untampered and bound to `binding`."""
        try:
            encoded, mac = cursor.split(".", 1)
            body = base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4))
            if not hmac.compare_digest(mac, self._mac(body)):
                raise ValueError
            fields: dict[str, Any] = json.loads(body)
            if fields["b"] != binding:
                raise ValueError
            return PagePosition(str(fields["s"]), int(fields["p"]), int(fields["r"]))
        except (ValueError, KeyError, TypeError, UnicodeDecodeError):
            raise ContractError(ErrorCode.STALE_PAGE) from None
