"""Scopes routed to replica groups: which scopes this replica projects and serves, and
moving a scope from one group to another.

Why: every replica holding every scope's indexes stops fitting one machine. On a shared
(PostgreSQL) store each scope is routed to one replica group (`scope_routes`); only
that group's replicas project it and answer its calls, and any replica that receives a
call for another group's scope forwards it there (`service.http.router`). The store
stays one database, so idempotency, confirmation refs and the journal are unchanged:
only projections are partitioned.

- **A scope with no route** is claimed by the group of the replica that first serves a
  call in it (the first claim wins in the database; every later call reads the same
  route). No group has to be configured as a default that every replica must agree
  on, a new scope never waits for a group that is down (the claimant is answering),
  and a load balancer spreading first calls spreads new scopes over the groups.
  Placement by size is the operator's: `engram admin route move`. Scopes a database
  held before routes existed belong to the `default` group (the schema step), and
  until a scope is claimed (one written by an engine that serves no calls: `engram
  ingest`, an operator command) the replicas of the `default` group keep it
  projected, so replicas started without `--group` serve it warm, as before groups.
- **Serving** a scope needs its route to name this replica's group. A call in a scope
  this replica does not serve (forwarded here while the route moved, or no replica of
  the scope's group is live) answers the retriable STORE_UNAVAILABLE, never an answer
  from indexes that do not hold the scope. Each call holds the scope's serving lock
  shared, and a release takes it alone, so no call ranks over indexes being deleted.
- **Moving** a scope: the target group projects it from the journal while the current
  group serves (`moving_to`), and acknowledges once caught up; then the route flips
  and the old group's replicas delete the scope's index files and acknowledge. A
  replica that was down during a move deletes what it no longer holds at start.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from engram.models.codes import ContractError, ErrorCode
from engram.models.errors import EngramError
from engram.models.scope import Scope
from engram.ranking.read_write_lock import ReadWriteLock
from engram.service.store.base import DEFAULT_GROUP, Deployment, Route

from .clock import now_ms
from .dependencies import Dependencies
from .records import scope_key
from .replica import LIVE_WITHIN_MS


class NoLiveReplica(EngramError):
    """The target group has no live replica to project the scope."""


logger = logging.getLogger("engram.routing")

MOVE_POLL_S = 0.1


class Routing:
    """This replica's group and the scope routes of the shared store.

    ``group`` None: an engine that is no replica (an operator command); it projects
    whatever it is asked to and serves no routed calls."""

    def __init__(self, deployment: Deployment, replica_id: str, group: str | None) -> None:
        self.deployment = deployment
        self.replica_id = replica_id
        self.group = group
        self._locks: dict[Scope, ReadWriteLock] = {}
        self._locks_guard = threading.Lock()
        self._acked: dict[Scope, int] = {}  # the route version this replica last acknowledged

    # -- serving --------------------------------------------------------------------------
    def serves(self, scope: Scope) -> bool:
        """Whether this replica answers the scope's calls (a scope with no route is
        claimed for this replica's group)."""
        if self.group is None:
            return True
        route = self.deployment.route(scope) or self.deployment.claim_route(scope, self.group)
        return route.group == self.group

    def projects(self, scope: Scope) -> bool:
        """Whether this replica keeps the scope's indexes: its group serves it or is
        taking it over, or (the default group) nobody has claimed it yet."""
        if self.group is None:
            return True
        return self._projects(self.deployment.route(scope))

    def _projects(self, route: Route | None) -> bool:
        if route is None:
            return self.group == DEFAULT_GROUP
        return self.group in (route.group, route.moving_to)

    @contextmanager
    def serving(self, scope: Scope) -> Iterator[None]:
        """Hold the scope for one call; STORE_UNAVAILABLE (retriable) when this replica
        does not serve it."""
        with self._lock(scope).read():
            if not self.serves(scope):
                raise ContractError(ErrorCode.STORE_UNAVAILABLE)
            yield

    def destination(self, scope: Scope) -> list[str] | None:
        """Where a call in the scope goes: None to answer here (this group serves it,
        it has no route yet, or this is no replica); else the advertised URLs of the
        live replicas of the group that serves it, in a stable order per scope (one
        replica takes a scope's calls while the group's membership holds), possibly
        empty."""
        if self.group is None:
            return None
        route = self.deployment.route(scope)
        if route is None or route.group == self.group:
            return None
        members = [
            m.advertise_url
            for m in self.deployment.group_members(route.group, now_ms() - LIVE_WITHIN_MS)
            if m.advertise_url and m.replica_id != self.replica_id
        ]
        if not members:
            return []
        turn = int.from_bytes(hashlib.sha256(repr(scope).encode()).digest()[:4], "big") % len(members)
        return members[turn:] + members[:turn]

    def _lock(self, scope: Scope) -> ReadWriteLock:
        with self._locks_guard:
            return self._locks.setdefault(scope, ReadWriteLock())

    # -- following ------------------------------------------------------------------------
    def follow(self, deps: Dependencies, scope: Scope) -> None:
        """The follower's step for a woken scope: catch it up when this replica projects
        it, else delete whatever of it this replica still keeps; acknowledge the route
        version followed (what a move waits for)."""
        route = self.deployment.route(scope)
        if self._projects(route):
            deps.projector.catch_up(scope)
            if route is not None:
                self._acknowledge(scope, route)
        elif route is not None and (self.release(deps, scope) or route.version > 1):
            self._acknowledge(scope, route)

    def release(self, deps: Dependencies, scope: Scope) -> bool:
        """Delete the scope's index files here once no call holds it; True when there
        was something to delete."""
        key = scope_key(scope)
        if not deps.ranker.holds(key):
            return False
        with self._lock(scope).write(), deps.projector.exclusive(scope):
            if self.projects(scope):  # routed back meanwhile
                return False
            deps.ranker.drop(key)
        logger.info("released scope %s/%s (now routed to another group)", *scope)
        return True

    def release_unheld(self, deps: Dependencies) -> int:
        """At start: delete the scopes kept here that this replica's group no longer
        projects (moved away while it was down). Returns how many."""
        if self.group is None:
            return 0
        routes = dict(self.deployment.routes())
        released = 0
        for scope in deps.store.scopes():
            route = routes.get(scope)
            if not self._projects(route) and self.release(deps, scope):
                released += 1
                if route is not None:
                    self._acknowledge(scope, route)
        return released

    def _acknowledge(self, scope: Scope, route: Route) -> None:
        if self._acked.get(scope, 0) < route.version:
            self.deployment.ack_route(scope, self.replica_id, route.version)
            self._acked[scope] = route.version


# -- the operator's surface --------------------------------------------------------------


@dataclass(frozen=True)
class MoveOutcome:
    """Where a `move` left the scope: ``projected`` once every live replica of the
    target group caught it up; ``flipped`` once the route names the target group;
    ``released`` once every live replica of the old group deleted its files."""

    group: str
    previous: str | None
    projected: bool
    flipped: bool
    released: bool

    def as_json(self) -> dict[str, Any]:
        return {
            "group": self.group,
            "previous_group": self.previous,
            "projected": self.projected,
            "route_flipped": self.flipped,
            "old_group_purge": "complete" if self.released else "pending",
        }


def move(
    deployment: Deployment, scope: Scope, group: str, *, project_wait_s: float, release_wait_s: float
) -> MoveOutcome:
    """Move the scope to `group`: the target group projects it from the journal, then the
    route flips, then the old group purges it. Rerunning a move that timed out resumes
    it. Raises NoLiveReplica when `group` has no live replica."""
    if not _live(deployment, group):
        raise NoLiveReplica(group)
    started = deployment.begin_move(scope, group)
    previous = started.group if started.group != group else None
    if not _wait_acks(deployment, scope, group, started.version, project_wait_s, require_member=True):
        return MoveOutcome(group, previous, projected=False, flipped=False, released=False)
    flipped = deployment.finish_move(scope, group) if started.moving_to == group else started
    released = previous is None or _wait_acks(
        deployment, scope, previous, flipped.version, release_wait_s, require_member=False
    )
    return MoveOutcome(group, previous, projected=True, flipped=flipped.group == group, released=released)


def routes(deployment: Deployment) -> list[dict[str, Any]]:
    """Every routed scope: its group, and the group taking it over during a move."""
    return [
        {"tenant": t, "workspace": w, "group": r.group, "moving_to": r.moving_to, "version": r.version}
        for (t, w), r in deployment.routes()
    ]


def _live(deployment: Deployment, group: str) -> set[str]:
    return {m.replica_id for m in deployment.group_members(group, now_ms() - LIVE_WITHIN_MS)}


def _wait_acks(
    deployment: Deployment, scope: Scope, group: str, version: int, wait_s: float, *, require_member: bool
) -> bool:
    """Wait until every live replica of `group` acknowledged `version` of the route."""
    deadline = time.monotonic() + wait_s
    while True:
        members = _live(deployment, group)
        if (members or not require_member) and members <= deployment.route_acks(scope, version):
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(MOVE_POLL_S)
