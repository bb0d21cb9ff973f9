"""Prometheus metrics for the MCP front end, on a registry of its own.

Why a registry per app: several apps (tests, a restarted server in one process) must
not collide on the global default registry. `observe_channel_latency` is the hook the
engine may call to report per-channel ranking latency (lexical, semantic, fusion).
"""

from __future__ import annotations

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram, generate_latest

_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class Metrics:
    content_type = CONTENT_TYPE_LATEST

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        self.calls = Counter(
            "engram_mcp_calls",
            "MCP tool calls by tool and outcome code ('ok', an error code, or a JSON-RPC code).",
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
            "Latency of each ranking channel (reported by the engine).",
            ["channel"],
            buckets=_BUCKETS,
            registry=self.registry,
        )

    def observe_call(self, tool: str, code: str, seconds: float) -> None:
        self.calls.labels(tool=tool, code=code).inc()
        self.latency.labels(tool=tool).observe(seconds)

    def observe_channel_latency(self, channel: str, seconds: float) -> None:
        self.channel_latency.labels(channel=channel).observe(seconds)

    def render(self) -> bytes:
        return generate_latest(self.registry)
