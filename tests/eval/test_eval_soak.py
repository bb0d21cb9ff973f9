"""The soak (`engram bench --soak`): a tiny run end to end, and how it counts.

Behaviour only: what the run reports and finds again, never how fast (the server runs
without the model, so its searches are lexical)."""

from __future__ import annotations

import json
from pathlib import Path

from engram.eval.soak import OPERATIONS, Call, run_soak, windows


def test_tiny_soak_run(tmp_path: Path, encoder) -> None:
    out = tmp_path / "out"
    result = run_soak(
        200, out, tmp_path / "work", seconds=6, window_s=2, clients=2, encoder=encoder, say=lambda _m: None
    )
    assert "skipped" not in result, result
    done = result["by_operation"]
    assert set(done) == set(OPERATIONS) - {"search_hybrid"} and all(n > 0 for n in done.values()), done
    assert result["errors"] == 0, result["outcomes"]
    verified = result["verified"]
    assert verified["admitted_current"] > 0 and verified["admitted_not_readable"] == 0, verified
    assert verified["forgotten"] > 0 and verified["forgotten_still_readable"] == 0, verified
    for at in (result["start"], result["end"]):
        assert 0 < at["anon_mb"] <= at["rss_mb"] and at["open_files"] > 0
    assert len(result["windows"]) >= 3 and sum(w["calls"] for w in result["windows"]) == result["calls"]
    assert result["server_exit"] in (0, -15)  # stopped by SIGTERM (uvicorn re-raises it), not killed
    assert json.loads((out / "soak.json").read_text())["calls"] == result["calls"]
    report = (out / "soak.md").read_text()
    assert "errors that are not retriable codes: **0**" in report and "p99 per window" in report


def test_soak_without_forgets_runs_the_same_mix_less_its_forgets(tmp_path: Path, encoder) -> None:
    result = run_soak(
        200,
        tmp_path / "out",
        tmp_path / "work",
        seconds=4,
        window_s=4,
        clients=2,
        encoder=encoder,
        say=lambda _m: None,
        forgets=False,
    )
    assert result["forgets"] is False and result["errors"] == 0, result
    assert set(result["by_operation"]) == set(OPERATIONS) - {"search_hybrid", "forget"}, result["by_operation"]
    assert result["verified"]["forgotten"] == 0 and result["verified"]["admitted_current"] > 0


def test_windows_count_errors_apart_from_retriable_answers() -> None:
    calls = [
        Call(0.5, "get", 0.010, "ok"),
        Call(1.0, "get", 0.030, "ok"),
        Call(1.5, "capture", 0.020, "retriable:STORE_UNAVAILABLE"),
        Call(2.5, "get", 0.040, "NOT_FOUND"),
        Call(3.0, "search_lexical", 0.050, "exception:ReadTimeout"),
        Call(3.5, "forget", 0.060, "ok"),
    ]
    first, second = windows(calls, 2.0)
    assert (first["calls"], first["errors"], first["retriable"]) == (3, 0, 1)
    assert (second["calls"], second["errors"], second["retriable"]) == (3, 2, 0)
    assert set(first["latency"]) == {"get"} and first["latency"]["get"]["n"] == 2
    assert set(second["latency"]) == {"forget"}  # only answered calls are timed


def test_an_answer_committed_to_an_event_stream_is_read() -> None:
    """A call still running after the MCP SDK's keepalive interval is answered as
    `text/event-stream` (a ping comment, then the response as one message event): the
    harness reads it as it reads a JSON body, not as a failure."""
    import httpx2

    from engram.eval.service_memory import answer_of

    envelope = {"ok": True, "output": {"value": {"record_id": "mem_1"}}}
    message = {"jsonrpc": "2.0", "id": 3, "result": {"structuredContent": envelope}}
    stream = f": ping\r\n\r\nevent: message\r\ndata: {json.dumps(message)}\r\n\r\n"
    as_stream = httpx2.Response(200, headers={"content-type": "text/event-stream"}, text=stream)
    as_json = httpx2.Response(200, headers={"content-type": "application/json"}, text=json.dumps(message))
    assert answer_of(as_stream) == answer_of(as_json) == ("ok", {"record_id": "mem_1"})
    failed = {"jsonrpc": "2.0", "id": 4, "error": {"code": -32603, "message": "x"}}
    assert answer_of(
        httpx2.Response(200, headers={"content-type": "text/event-stream"}, text=f"data: {json.dumps(failed)}\n\n")
    ) == ("rpc:-32603", None)
