"""Prometheus metrics for the service, on a registry of its own.

Why a registry per app: several apps (tests, a restarted server in one process) must
not collide on the global default registry. What it holds: MCP calls by tool and
outcome code and their latency; each ranking stage's latency (the engine reports it
through `observe_channel_latency`); per scope, at scrape time, projection lag and the
number of candidates and records in each state (counts and cursors, never content);
the shared database server's connectivity (primary changes, outages, reconnections);
and the process itself (memory, CPU, open files, garbage collection).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    GCCollector,
    Histogram,
    PlatformCollector,
    ProcessCollector,
    generate_latest,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

logger = logging.getLogger("engram.mcp.metrics")

_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class ScopeCollector(Collector):
    """Gauges read from the engine's per-scope statistics when Prometheus scrapes."""

    def __init__(self, scope_stats: Callable[[], Iterable[Any]]) -> None:
        self._scope_stats = scope_stats

    def collect(self) -> Iterator[Metric]:
        labels = ["tenant", "workspace"]
        lag = GaugeMetricFamily(
            "engram_projection_lag_events",
            "Journal events a projection channel of the scope has not applied yet.",
            labels=[*labels, "channel"],
        )
        records = GaugeMetricFamily(
            "engram_scope_records", "Records of the scope in each lifecycle state.", labels=[*labels, "state"]
        )
        candidates = GaugeMetricFamily(
            "engram_scope_candidates", "Candidates of the scope in each state.", labels=[*labels, "state"]
        )
        try:
            stats = list(self._scope_stats())
        except Exception as exc:  # noqa: BLE001 - a scrape must not take the service down
            logger.error("scope statistics unavailable: %s", type(exc).__name__)
            return
        for entry in stats:
            tenant, workspace = entry.scope
            for channel, events in entry.projection_lag.items():
                lag.add_metric([tenant, workspace, channel], events)
            for state, count in entry.counts.records.items():
                records.add_metric([tenant, workspace, state], count)
            for state, count in entry.counts.candidates.items():
                candidates.add_metric([tenant, workspace, state], count)
        yield from (lag, records, candidates)


class StoreConnectivityCollector(Collector):
    """The shared database server as the store's connections see it, read when
    Prometheus scrapes (no I/O): reachable or not, which server, and how often the
    primary changed, connections were lost and made again (logged as they happen)."""

    def __init__(self, state: Callable[[], Any]) -> None:
        self._state = state

    def collect(self) -> Iterator[Metric]:
        state = self._state()
        if state is None:  # the embedded store
            return
        yield GaugeMetricFamily(
            "engram_store_reachable",
            "1 while the database server accepts connections; 0 from a call that found none until one is made.",
            value=int(state.reachable),
        )
        server = GaugeMetricFamily(
            "engram_store_server", "The database server last connected to (host:port).", labels=["server"]
        )
        server.add_metric([state.server or ""], 1)
        yield server
        for name, help_, value in (
            (
                "primary_changes",
                "Connections made to another server than the one before (a failover).",
                state.primary_changes,
            ),
            ("outages", "Times no database server accepted a connection within the bound.", state.outages),
            ("reconnects", "Outages that ended with a connection made.", state.reconnects),
            ("connections", "Connections made to the database server.", state.connections),
        ):
            yield CounterMetricFamily(f"engram_store_{name}", help_, value=value)


class Metrics:
    content_type = CONTENT_TYPE_LATEST

    def __init__(
        self,
        registry: CollectorRegistry | None = None,
        *,
        scope_stats: Callable[[], Iterable[Any]] | None = None,
        store_connectivity: Callable[[], Any] | None = None,
    ) -> None:
        self.registry = registry or CollectorRegistry()
        self.calls = Counter(
            "engram_mcp_calls",
            "MCP tool calls by tool and outcome code ('ok', an error code, 'input_required', or a JSON-RPC code).",
            ["tool", "code"],
            registry=self.registry,
        )
        self.latency = Histogram(
            "engram_mcp_call_latency_seconds",
            "Latency of MCP tool calls, by tool.",
            ["tool"],
            buckets=_BUCKETS,
            registry=self.registry,
        )
        self.channel_latency = Histogram(
            "engram_ranking_channel_latency_seconds",
            "Latency of each search stage: lexical, semantic (query encoding included), fusion.",
            ["channel"],
            buckets=_BUCKETS,
            registry=self.registry,
        )
        ProcessCollector(registry=self.registry)
        PlatformCollector(registry=self.registry)
        GCCollector(registry=self.registry)
        if scope_stats is not None:
            self.registry.register(ScopeCollector(scope_stats))
        if store_connectivity is not None:
            self.registry.register(StoreConnectivityCollector(store_connectivity))

    def observe_call(self, tool: str, code: str, seconds: float) -> None:
        self.calls.labels(tool=tool, code=code).inc()
        self.latency.labels(tool=tool).observe(seconds)

    def observe_channel_latency(self, channel: str, seconds: float) -> None:
        self.channel_latency.labels(channel=channel).observe(seconds)

    def render(self) -> bytes:
        """The exposition text; reads the store (scope statistics), so call it off the event loop."""
        return generate_latest(self.registry)
