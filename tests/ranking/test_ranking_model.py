"""End to end with the real all-MiniLM-L6-v2 (loaded once per session)."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from ranking_support import doc

from engram.ranking import HYBRID_PROFILE, LEXICAL_PROFILE, MiniLMEncoder, Ranker

pytestmark = pytest.mark.model

DISTRACTORS = [
    "Quarterly budget review moved to the second floor meeting room.",
    "The team agreed to adopt weekly code reviews for the billing module.",
    "Remember to water the office plants every Monday.",
    "Database migrations must run before the application servers restart.",
]


def test_paraphrase_found_by_hybrid_not_lexical(tmp_path: Path, minilm: MiniLMEncoder):
    ranker = Ranker(tmp_path / "idx", minilm)
    docs = [doc("s", f"mem_d{i}", text) for i, text in enumerate(DISTRACTORS)]
    docs.append(doc("s", "mem_car", "My automobile would not start this morning, so I took the bus."))
    ranker.apply("s", upserts=docs, removals=[], through_cursor=1)
    query = "vehicle ignition failure"
    assert ranker.search("s", query, LEXICAL_PROFILE, valid_as_of_ms=0).candidates == []
    hybrid = ranker.search("s", query, HYBRID_PROFILE, valid_as_of_ms=0).candidates
    assert hybrid[0].record_id == "mem_car"
    assert hybrid[0].lexical_rank is None and hybrid[0].semantic_rank == 1
    ranker.close()


def test_purge_with_real_model(tmp_path: Path, minilm: MiniLMEncoder):
    ranker = Ranker(tmp_path / "idx", minilm)
    secret = "zyxquorblat"
    ranker.apply(
        "s",
        upserts=[
            doc("s", "mem_x", f"The {secret} launch codes are in the red binder."),
            doc("s", "mem_y", DISTRACTORS[0]),
        ],
        removals=[],
        through_cursor=1,
    )
    assert (
        ranker.search("s", "where are the launch codes", HYBRID_PROFILE, valid_as_of_ms=0).candidates[0].record_id
        == "mem_x"
    )
    ranker.apply("s", upserts=[], removals=["mem_x"], through_cursor=2)
    assert ranker.purge("s", ["mem_x"])
    leftovers = [
        p
        for p in tmp_path.rglob("*")
        if p.is_file() and (secret.encode() in p.read_bytes() or b"mem_x" in p.read_bytes())
    ]
    assert leftovers == []
    # mem_x is gone; the unrelated mem_y is no match either (below the semantic-only floor)
    assert [c.record_id for c in ranker.search("s", "launch codes", HYBRID_PROFILE, valid_as_of_ms=0).candidates] == []
    ranker.close()


SURNAMES = [
    "Okonkwo",
    "Vasquez-Ibarra",
    "Thorbjornsen",
    "Nakagawa",
    "Przybylski",
    "Oyelaran",
    "Kowalczyk",
    "Abernathy",
    "Quisumbing",
    "Hvorostovsky",
    "Ferreira",
    "Lindqvist",
    "Achterberg",
    "Mbeki",
    "Zielinski",
]
TEMPLATES = [
    "Incident {code}: the deploy pipeline failed during the nightly build; {name} rolled back the release.",
    "Ticket {code} reported by {name}: the nightly build pipeline timed out while deploying the release.",
    "Release note {code}: {name} fixed a deploy pipeline failure in the nightly build.",
    "Postmortem {code}: nightly release build broke the deploy pipeline, escalated to {name}.",
]


def stress_collection(n: int = 200) -> tuple[list, list[tuple[str, str]]]:
    """Near-identical documents told apart only by an identifier code and a rare surname."""
    rng = random.Random(7)
    docs, queries = [], []
    for i in range(n):
        code = rng.choice(["ERR_", "KX-", "INC", "BUG-"]) + f"{rng.randint(1000, 9999)}{rng.choice('abcdxyz')}"
        name = f"{rng.choice(SURNAMES)}{i}"
        docs.append(doc("s", f"mem_{i:04d}", rng.choice(TEMPLATES).format(code=code, name=name)))
        queries.append((f"mem_{i:04d}", code if i % 2 else f"what did {name} do"))
    return docs, queries


def mrr(ranker: Ranker, queries, profile) -> float:
    total = 0.0
    for target, query in queries:
        order = [c.record_id for c in ranker.search("s", query, profile, valid_as_of_ms=0).candidates]
        total += 1.0 / (order.index(target) + 1) if target in order else 0.0
    return total / len(queries)


def test_identifier_stress_set_hybrid_not_below_lexical(tmp_path: Path, minilm: MiniLMEncoder):
    ranker = Ranker(tmp_path / "idx", minilm)
    docs, queries = stress_collection()
    ranker.apply("s", upserts=docs, removals=[], through_cursor=1)
    lexical = mrr(ranker, queries, LEXICAL_PROFILE)
    hybrid = mrr(ranker, queries, HYBRID_PROFILE)
    print(f"stress MRR lexical={lexical:.3f} hybrid={hybrid:.3f}")
    assert lexical > 0.9
    assert hybrid >= lexical
    ranker.close()
