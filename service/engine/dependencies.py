"""The engine's collaborators, wired once at open and handed to each operation."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from engram.ranking import Ranker
from engram.service.store.base import Store

from .paging import SnapshotCache
from .policy import Policies
from .projector import Projector
from .replica import Replica
from .sealing import BodyVault
from .sweeper import PurgeSchedule, Sweeper

if TYPE_CHECKING:
    from .routing import Routing


@dataclass
class Dependencies:
    """What every operation works with (the store, the key vault, the ranker and its
    projector, the policies, the paging snapshots, when forgets purge and the purge
    sweeper, and on a shared store this replica and its routing), built once by
    ``Engine.open``."""

    data_dir: Path
    store: Store
    vault: BodyVault
    ranker: Ranker
    projector: Projector
    policies: Policies
    snapshots: SnapshotCache
    purge: PurgeSchedule = field(default_factory=PurgeSchedule)
    sweeper: Sweeper = field(default_factory=Sweeper)
    replica: Replica | None = None  # set when the store is shared by several replicas
    routing: Routing | None = None  # set with `replica`: this replica's group and the scope routes
