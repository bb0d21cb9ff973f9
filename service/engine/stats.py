"""Per-scope counts and projection lag, for the operators' metrics.

Why: an operator watching a service needs to see a projection falling behind the
journal (search would soon refuse `lexical_and_semantic`), and how many records and
candidates each scope holds, without reading any of them. Counts and cursors only.
"""

from __future__ import annotations

from dataclasses import dataclass

from engram.models.scope import Scope
from engram.service.store.base import StateCounts

from .dependencies import Dependencies


@dataclass(frozen=True)
class ScopeStats:
    scope: Scope
    counts: StateCounts
    #: Journal events each projection channel (lexical, semantic) has not applied yet.
    projection_lag: dict[str, int]


def scope_stats(deps: Dependencies, only: Scope | None = None) -> list[ScopeStats]:
    """One entry per scope the store knows (or for ``only``, if the store knows it)."""
    scopes = deps.store.scopes()
    if only is not None:
        scopes = [scope for scope in scopes if scope == only]
    return [ScopeStats(scope, deps.store.state_counts(scope), deps.projector.lag(scope)) for scope in scopes]
