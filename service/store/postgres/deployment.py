"""The tables only a shared deployment has: the replica registry (heartbeats, groups,
advertised URLs), the scope routes and their moves between replica groups, and each
replica's acknowledgements of routes and of physical purges.

They are their own object (`PostgresStore.deployment`, the `Deployment` protocol), so
what a store must do for a record is apart from what several replicas must agree on.
"""

from __future__ import annotations

from .. import rows as decoded
from ..base import DEFAULT_GROUP, ReplicaEntry, Route, Scope
from ..rows import REPLICA_COLUMNS, ROUTE_COLUMNS
from .connection import Database, execute_many, named_row
from .notifications import notify

# Replica `r` holds the scope of pending purge `p`: the scope has no route (every replica
# may), or r's group serves it or is taking it over. Only holders owe a purge.
_HOLDS_SCOPE = (
    "(NOT EXISTS (SELECT 1 FROM scope_routes s WHERE s.tenant=p.tenant AND s.workspace=p.workspace)"
    " OR EXISTS (SELECT 1 FROM scope_routes s WHERE s.tenant=p.tenant AND s.workspace=p.workspace"
    " AND r.replica_group IN (s.replica_group, s.moving_to)))"
)


#: A scope's route.
_ROUTE_OF = f"SELECT {ROUTE_COLUMNS} FROM scope_routes WHERE tenant=%s AND workspace=%s"


class PostgresDeployment:
    """The shared deployment's tables in the database of a `PostgresStore`."""

    def __init__(self, db: Database) -> None:
        self._db = db

    def heartbeat(
        self, replica_id: str, at_ms: int, group: str = DEFAULT_GROUP, advertise_url: str | None = None
    ) -> None:
        with self._db.transaction() as conn:
            conn.execute(
                "INSERT INTO replicas (replica_id, heartbeat_ms, registered_ms, replica_group, advertise_url)"
                " VALUES (%s,%s,%s,%s,%s) ON CONFLICT (replica_id) DO UPDATE SET heartbeat_ms=excluded.heartbeat_ms,"
                " replica_group=excluded.replica_group, advertise_url=excluded.advertise_url",
                (replica_id, at_ms, at_ms, group, advertise_url),
            )

    def replica_entries(self) -> list[ReplicaEntry]:
        """Every registered replica with its group, advertised URL and heartbeat."""
        return [
            decoded.replica(r)
            for r in self._db.named_rows(f"SELECT {REPLICA_COLUMNS} FROM replicas ORDER BY replica_id")
        ]

    def group_members(self, group: str, since_ms: int) -> list[ReplicaEntry]:
        """The replicas of `group` that heartbeat since `since_ms`."""
        return [
            decoded.replica(r)
            for r in self._db.named_rows(
                f"SELECT {REPLICA_COLUMNS} FROM replicas WHERE replica_group=%s AND heartbeat_ms >= %s"
                " ORDER BY replica_id",
                (group, since_ms),
            )
        ]

    def live_holders(self, scope: Scope, since_ms: int) -> list[str]:
        return [
            r[0]
            for r in self._db.rows(
                "SELECT r.replica_id FROM replicas r, (SELECT %s::text AS tenant, %s::text AS workspace) p"
                f" WHERE r.heartbeat_ms >= %s AND {_HOLDS_SCOPE} ORDER BY r.replica_id",
                (*scope, since_ms),
            )
        ]

    # scope routes ------------------------------------------------------------------------
    def route(self, scope: Scope) -> Route | None:
        rows = self._db.named_rows(_ROUTE_OF, scope)
        return decoded.route(rows[0]) if rows else None

    def routes(self) -> list[tuple[Scope, Route]]:
        return [
            ((r["tenant"], r["workspace"]), decoded.route(r))
            for r in self._db.named_rows(
                f"SELECT tenant, workspace, {ROUTE_COLUMNS} FROM scope_routes ORDER BY tenant, workspace"
            )
        ]

    def claim_route(self, scope: Scope, group: str) -> Route:
        with self._db.transaction() as conn:
            if conn.execute(
                "INSERT INTO scope_routes VALUES (%s,%s,%s,NULL,1) ON CONFLICT (tenant, workspace) DO NOTHING",
                (*scope, group),
            ).rowcount:
                notify(conn, scope)
            row = named_row(conn, _ROUTE_OF, scope)
        assert row is not None
        return decoded.route(row)

    def begin_move(self, scope: Scope, group: str) -> Route:
        """Start moving the scope to `group`: `group` projects it while the current one
        still serves. A scope with no route is routed to `group` at once; a move already
        under way to `group`, or a scope already there, is left as it is."""
        with self._db.transaction() as conn:
            row = named_row(conn, _ROUTE_OF + " FOR UPDATE", scope)
            if row is None:
                conn.execute("INSERT INTO scope_routes VALUES (%s,%s,%s,NULL,1)", (*scope, group))
                route = Route(group, None, 1)
            elif group in ((now := decoded.route(row)).group, now.moving_to):
                return now
            else:
                route = Route(now.group, group, now.version + 1)
                conn.execute(
                    "UPDATE scope_routes SET moving_to=%s, version=%s WHERE tenant=%s AND workspace=%s",
                    (group, route.version, *scope),
                )
            notify(conn, scope)
        return route

    def finish_move(self, scope: Scope, group: str) -> Route:
        """Flip the route of a scope being moved to `group`: `group` serves it now."""
        with self._db.transaction() as conn:
            row = named_row(
                conn,
                "UPDATE scope_routes SET replica_group=moving_to, moving_to=NULL, version=version+1"
                f" WHERE tenant=%s AND workspace=%s AND moving_to=%s RETURNING {ROUTE_COLUMNS}",
                (*scope, group),
            )
            if row is None:
                row = named_row(conn, _ROUTE_OF, scope)
            else:
                notify(conn, scope)
        assert row is not None
        return decoded.route(row)

    def ack_route(self, scope: Scope, replica_id: str, version: int) -> None:
        with self._db.transaction() as conn:
            conn.execute(
                "INSERT INTO route_acks VALUES (%s,%s,%s,%s) ON CONFLICT (tenant, workspace, replica_id)"
                " DO UPDATE SET version=GREATEST(route_acks.version, excluded.version)",
                (*scope, replica_id, version),
            )

    def route_acks(self, scope: Scope, version: int) -> set[str]:
        """Replicas that followed the scope's route through `version` (or later)."""
        return {
            r[0]
            for r in self._db.rows(
                "SELECT replica_id FROM route_acks WHERE tenant=%s AND workspace=%s AND version >= %s",
                (*scope, version),
            )
        }

    def retire_replica(self, replica_id: str) -> bool:
        """Forget a replica for good: its registration and acknowledgements go, and the
        purges only it still owed are settled. False when it was not registered."""
        with self._db.transaction() as conn:
            gone = conn.execute("DELETE FROM replicas WHERE replica_id=%s", (replica_id,)).rowcount
            conn.execute("DELETE FROM purge_acks WHERE replica_id=%s", (replica_id,))
            conn.execute(
                f"DELETE FROM pending_purges p WHERE NOT EXISTS (SELECT 1 FROM replicas r WHERE {_HOLDS_SCOPE}"
                " AND NOT EXISTS (SELECT 1 FROM purge_acks a WHERE a.tenant=p.tenant AND a.workspace=p.workspace"
                " AND a.record_id=p.record_id AND a.replica_id=r.replica_id))"
            )
            conn.execute(
                "DELETE FROM purge_acks a WHERE NOT EXISTS (SELECT 1 FROM pending_purges p"
                " WHERE p.tenant=a.tenant AND p.workspace=a.workspace AND p.record_id=a.record_id)"
            )
        return gone == 1

    def ack_purges(self, scope: Scope, record_ids: list[str], replica_id: str) -> None:
        with self._db.transaction() as conn:
            execute_many(
                conn,
                "INSERT INTO purge_acks VALUES (%s,%s,%s,%s) ON CONFLICT DO NOTHING",
                [(*scope, rid, replica_id) for rid in record_ids],
            )

    def purges_awaiting(self, replica_id: str) -> dict[Scope, list[str]]:
        awaiting: dict[Scope, list[str]] = {}
        # A registered replica owes only the purges of scopes its group holds; one not
        # registered yet (before its first heartbeat) owes every pending purge.
        for tenant, workspace, record_id in self._db.rows(
            "SELECT p.tenant, p.workspace, p.record_id FROM pending_purges p WHERE NOT EXISTS ("
            " SELECT 1 FROM purge_acks a WHERE a.tenant=p.tenant AND a.workspace=p.workspace"
            " AND a.record_id=p.record_id AND a.replica_id=%s)"
            " AND (NOT EXISTS (SELECT 1 FROM replicas r WHERE r.replica_id=%s)"
            f"  OR EXISTS (SELECT 1 FROM replicas r WHERE r.replica_id=%s AND {_HOLDS_SCOPE}))"
            " ORDER BY p.tenant, p.workspace, p.record_id",
            (replica_id, replica_id, replica_id),
        ):
            awaiting.setdefault((tenant, workspace), []).append(record_id)
        return awaiting

    def settle_purges(self, scope: Scope, record_ids: list[str], live: list[str]) -> list[str]:
        """Clear the pending purges every registered replica holding the scope
        acknowledged; the ids that some replica of `live` has still to purge."""
        with self._db.transaction() as conn:
            conn.execute(
                "DELETE FROM pending_purges p WHERE p.tenant=%s AND p.workspace=%s AND p.record_id = ANY(%s)"
                f" AND NOT EXISTS (SELECT 1 FROM replicas r WHERE {_HOLDS_SCOPE} AND NOT EXISTS ("
                "  SELECT 1 FROM purge_acks a WHERE a.tenant=p.tenant AND a.workspace=p.workspace"
                "  AND a.record_id=p.record_id AND a.replica_id=r.replica_id))",
                (*scope, list(record_ids)),
            )
            conn.execute(  # acknowledgements of purges no longer pending
                "DELETE FROM purge_acks a WHERE a.tenant=%s AND a.workspace=%s AND a.record_id = ANY(%s)"
                " AND NOT EXISTS (SELECT 1 FROM pending_purges p WHERE p.tenant=a.tenant"
                " AND p.workspace=a.workspace AND p.record_id=a.record_id)",
                (*scope, list(record_ids)),
            )
            rows = conn.execute(
                "SELECT p.record_id FROM pending_purges p WHERE p.tenant=%s AND p.workspace=%s"
                " AND p.record_id = ANY(%s) AND EXISTS (SELECT 1 FROM unnest(%s::text[]) AS l(replica_id)"
                "  WHERE NOT EXISTS (SELECT 1 FROM purge_acks a WHERE a.tenant=p.tenant"
                "  AND a.workspace=p.workspace AND a.record_id=p.record_id AND a.replica_id=l.replica_id))"
                " ORDER BY p.record_id",
                (*scope, list(record_ids), list(live)),
            ).fetchall()
        return [r[0] for r in rows]
