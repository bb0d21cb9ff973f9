"""/metrics: per-scope counts and projection lag, stage latency, process metrics."""

from __future__ import annotations

import factories
from prometheus_client.parser import text_string_to_metric_families
from starlette.testclient import TestClient

from engram.models.tools import CAPTURE, REQUEST_ADMISSION, SEARCH
from engram.service.http.app import create_app
from engram.service.settings import Settings

SECRET = b"metrics-test-host-secret-0123456789abcdef"


def _samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def test_metrics_report_scopes_stages_and_the_process(engine, tmp_path):
    app = create_app(engine, Settings(data_dir=tmp_path / "app"), host_secret=SECRET)
    ctx = factories.context()
    first = engine.execute(CAPTURE, ctx, factories.capture_args("Rotate the ingress certificates monthly."))
    engine.execute(CAPTURE, ctx, factories.capture_args("Vacuum the billing ledger nightly."))
    engine.execute(
        REQUEST_ADMISSION, ctx, {"candidate_id": first["candidate_id"], "idempotency_key": factories.key("adm")}
    )
    hybrid = {
        "query": "ingress certificates",
        "purpose_ref": factories.PURPOSE,
        "capability_policy": {"minimum_channels": "lexical_and_semantic"},
    }
    engine.execute(SEARCH, ctx, hybrid)

    with TestClient(app) as client:
        response = client.get("/metrics")
    assert response.status_code == 200
    samples = _samples(response.text)
    scope = (("tenant", "acme"), ("workspace", "main"))

    def value(name: str, **labels: str) -> float:
        return samples[(name, tuple(sorted((*scope, *labels.items()))))]

    assert value("engram_scope_records", state="accepted_current") == 1
    candidates = {dict(k[1])["state"]: v for k, v in samples.items() if k[0] == "engram_scope_candidates"}
    assert sum(candidates.values()) == 2 and len(candidates) == 2  # one admitted, one still pending
    assert value("engram_projection_lag_events", channel="lexical") == 0
    assert value("engram_projection_lag_events", channel="semantic") == 0
    for stage in ("lexical", "semantic", "fusion"):
        assert samples[("engram_ranking_channel_latency_seconds_count", (("channel", stage),))] == 1
    assert any(name == "process_cpu_seconds_total" for name, _ in samples)
    assert any(name.startswith("python_gc_") for name, _ in samples)
    assert "Rotate" not in response.text and "ingress" not in response.text  # counts, never content
