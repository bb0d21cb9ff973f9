"""Conversation turns ingested with their neighbours as context."""

from __future__ import annotations

from engram.index_data.readers import with_context
from engram.index_data.records import IngestRecord, build_payload


def turn(rid: str, text: str) -> IngestRecord:
    return IngestRecord(external_id=rid, text=text, source_ref=f"beir:c/{rid}")


def test_neighbouring_turns_of_the_same_session_become_context():
    records = [
        turn("c1:D1:1", "A: hi"),
        turn("c1:D1:2", "B: I adopted a puppy"),
        turn("c1:D1:3", "A: what breed?"),
        turn("c1:D2:1", "B: new session"),
        turn("paper-7", "an abstract"),
    ]
    out = {r.external_id: r for r in with_context(records, 1)}
    assert out["c1:D1:2"].context == "A: hi\nA: what breed?"
    assert out["c1:D1:1"].context == "B: I adopted a puppy"
    assert out["c1:D2:1"].context == ""  # other sessions are not neighbours
    assert out["paper-7"] == records[4]  # not a turn: unchanged
    assert list(with_context(records, 0)) == records


def test_context_is_a_second_component_and_changes_nothing_without_it():
    plain, _ = build_payload(turn("c1:D1:2", "B: I adopted a puppy"), "purpose:ingest")
    assert [c["component_id"] for c in plain["components"]] == ["c1"]
    rec = next(
        r
        for r in with_context([turn("c1:D1:1", "A: hi"), turn("c1:D1:2", "B: a puppy")], 1)
        if r.external_id == "c1:D1:2"
    )
    payload, _ = build_payload(rec, "purpose:ingest")
    assert payload["components"][1] == {
        "component_id": "c2",
        "kind": "context",
        "text": "A: hi",
        "citation_ids": ["cit1"],
    }
    assert payload["primary_component_id"] == "c1"
