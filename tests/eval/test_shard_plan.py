"""The shard-plan simulation places every record within group capacity and needs no
more groups than a split-aware lower bound allows for an easy case."""

from __future__ import annotations

from engram.eval.shard_plan import plan


def test_every_scope_fits_and_big_scopes_are_split() -> None:
    p = plan(1_000, 20_000_000, 16)
    assert p.groups >= p.lower_bound
    assert (p.largest_scope > p.group_capacity) == (p.split_scopes > 0)
    small = plan(100, 1_000_000, 64)  # everything fits one group
    assert (small.groups, small.split_scopes) == (1, 0)
