"""This process as one replica of a store that several `engram serve` processes share.

Why: with PostgreSQL, other replicas append to the journal and forget records; this
replica's indexes must follow, and a forget must know which replicas have purged.
The replica registers under a stable id (kept in its data directory, so a restart is
the same replica), heartbeats, and follows the journal: the store wakes it when any
replica commits an event (LISTEN/NOTIFY), it catches the scope up by cursor, and a
slow poll covers missed wake-ups. Physical purges: every forgotten record stays listed
as pending until each registered replica acknowledged purging it from its own index
files; a forget answers `complete` once every *live* replica (fresh heartbeat) has,
and a replica that was down purges what it missed at start, before it is ready.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from engram.models.scope import Scope
from engram.service.store.base import DEFAULT_GROUP, SharedStore

from .clock import now_ms

logger = logging.getLogger("engram.replica")

HEARTBEAT_S = 1.0
LIVE_WITHIN_MS = 5_000
FULL_SCAN_S = 5.0
ACK_POLL_S = 0.05
REPLICA_ID_FILE = "replica_id"


def replica_id_for(data_dir: Path) -> str:
    """The stable id of the replica whose projections live in `data_dir`."""
    path = data_dir / REPLICA_ID_FILE
    if not path.exists():
        path.write_text("replica_" + uuid.uuid4().hex[:16] + "\n")
    return path.read_text().strip()


class Replica:
    """Registration, heartbeat, purge acknowledgements and the journal follower."""

    def __init__(
        self, store: SharedStore, replica_id: str, group: str = DEFAULT_GROUP, advertise_url: str | None = None
    ) -> None:
        self.store = store
        self.deployment = store.deployment
        self.replica_id = replica_id
        self.group = group  # registered with each heartbeat, with the URL peers forward calls to
        self.advertise_url = advertise_url
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None

    # -- purges ---------------------------------------------------------------------------
    def awaiting(self) -> dict[Scope, list[str]]:
        """Forgotten records this replica has not purged yet, by scope."""
        return self.deployment.purges_awaiting(self.replica_id)

    def acknowledge(self, scope: Scope, record_ids: list[str], wait_s: float) -> bool:
        """Record that this replica purged `record_ids`; wait up to `wait_s` for every
        live replica holding the scope (its group's) to have done the same. True when
        all of them have."""
        self.deployment.ack_purges(scope, record_ids, self.replica_id)
        deadline = time.monotonic() + wait_s
        while True:
            missing = self.deployment.settle_purges(
                scope, record_ids, self.deployment.live_holders(scope, now_ms() - LIVE_WITHIN_MS)
            )
            if not missing or time.monotonic() >= deadline:
                return not missing
            time.sleep(ACK_POLL_S)

    def registry(self) -> list[dict[str, object]]:
        """Every registered replica: id, group, advertised URL, seconds since its
        heartbeat, live or not."""
        at = now_ms()
        return [
            {
                "replica_id": e.replica_id,
                "group": e.group,
                "advertise_url": e.advertise_url,
                "heartbeat_age_s": round((at - e.heartbeat_ms) / 1000, 1),
                "live": at - e.heartbeat_ms <= LIVE_WITHIN_MS,
            }
            for e in self.deployment.replica_entries()
        ]

    # -- following -------------------------------------------------------------------------
    def follow(
        self,
        catch_up: Callable[[Scope], None],
        sweep: Callable[[], object],
        tidy: Callable[[], object] = lambda: None,
    ) -> None:
        """Start the background follower: heartbeat, wake on journal events, catch up,
        purge what other replicas' forgets left for this one. Registers the replica:
        an engine that never follows (an operator command) is never counted."""
        self._beat()
        self._thread = threading.Thread(
            target=self._run, args=(catch_up, sweep, tidy), name="engram-replica", daemon=True
        )
        self._thread.start()

    def _run(
        self,
        catch_up: Callable[[Scope], None],
        sweep: Callable[[], object],
        tidy: Callable[[], object],
    ) -> None:
        last_beat = last_scan = time.monotonic()
        while not self._stopped.is_set():
            try:
                woken = self.store.wait_for_journal(HEARTBEAT_S / 2)
                now = time.monotonic()
                if now - last_beat >= HEARTBEAT_S:
                    self._beat()
                    last_beat = now
                if now - last_scan >= FULL_SCAN_S:
                    woken |= set(self.store.scopes())
                    last_scan = now
                    tidy()
                for scope in sorted(woken):
                    catch_up(scope)
                if woken and self.awaiting():
                    sweep()
            except Exception as exc:  # noqa: BLE001 - the next round retries; reads stay fenced
                logger.warning("replica follower: %s", type(exc).__name__)
                self._stopped.wait(HEARTBEAT_S)

    def _beat(self) -> None:
        self.deployment.heartbeat(self.replica_id, now_ms(), self.group, self.advertise_url)

    def stop(self) -> None:
        self._stopped.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
