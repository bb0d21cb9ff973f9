"""The shard plan's simulation: how many replica groups a deployment needs when one
replica can no longer hold every scope's indexes, from the measured capacity figures.

Why a simulation: routing scopes to replica groups is a design on paper until a
deployment needs it; this sizes it. Scope sizes follow a Zipf law (a few large
tenants, a long tail); each group's replicas hold the indexes of the scopes routed to
it, within a usable share of the replica's memory; scopes are placed first-fit by
decreasing size; a scope larger than one group is split by record-id hash into
ceil(size / capacity) sub-shards whose searches are scattered and fused.

    python -m eval.shard_plan
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

#: Resident index memory per record: a reopened 1M-record scope peaked at 4.5 GiB (README, Capacity).
KIB_PER_RECORD = 4.5 * 1024 * 1024 / 1_000_000


@dataclass(frozen=True)
class Plan:
    records: int
    replica_gib: int
    group_capacity: int
    largest_scope: int
    split_scopes: int
    groups: int
    lower_bound: int
    median_fill: float


def plan(scopes: int, records: int, replica_gib: int, *, zipf_s: float = 1.1, usable: float = 0.7) -> Plan:
    weights = 1 / np.arange(1, scopes + 1) ** zipf_s
    sizes = np.maximum(1, np.round(weights / weights.sum() * records)).astype(int)
    capacity = int(replica_gib * usable * 1024 * 1024 / KIB_PER_RECORD)
    fills: list[int] = []
    split = 0
    for size in sorted(sizes.tolist(), reverse=True):
        if size > capacity:  # its own sub-shards, each a group
            split += 1
            parts = math.ceil(size / capacity)
            fills += [math.ceil(size / parts)] * parts
            continue
        for i, fill in enumerate(fills):
            if fill + size <= capacity:
                fills[i] += size
                break
        else:
            fills.append(size)
    return Plan(
        records,
        replica_gib,
        capacity,
        int(sizes.max()),
        split,
        len(fills),
        math.ceil(int(sizes.sum()) / capacity),
        round(float(np.median(fills)) / capacity, 2),
    )


def main() -> None:
    print("records | replica GiB | records/group | largest scope | scopes split | groups | lower bound | median fill")
    for records, gib in ((50_000_000, 64), (50_000_000, 32), (200_000_000, 64)):
        p = plan(10_000, records, gib)
        print(
            f"{p.records:,} | {p.replica_gib} | {p.group_capacity:,} | {p.largest_scope:,} | {p.split_scopes}"
            f" | {p.groups} | {p.lower_bound} | {p.median_fill}"
        )


if __name__ == "__main__":
    main()
