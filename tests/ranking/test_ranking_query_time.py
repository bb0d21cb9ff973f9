"""Time in a query: when-questions, absolute valid-time windows, and what ranking does
with them (the lexical channel's when-words, fusion's window boost)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest
from ranking_support import doc

from engram.ranking import LEXICAL_PROFILE, fuse
from engram.ranking.lexical import LexicalHit, LexicalIndex
from engram.ranking.profiles import LEXICAL, LexicalConfig, ProfileConfig, ValidTimeConfig
from engram.ranking.query_time import ValidTimeWindow, asks_when, read_query_time, valid_time_window


def ms(*parts: int) -> int:
    return int(datetime(*parts, tzinfo=UTC).timestamp() * 1000)


@pytest.mark.parametrize(
    "query",
    [
        "When did Caroline go to the LGBTQ support group?",
        "when is the party",
        "What year did John start surfing?",
        "Which month was John in Italy?",
        "In which week did Tim visit the UK?",
        "How long ago was her birthday?",
        "Since when has she been painting?",
    ],
)
def test_questions_that_ask_when(query: str):
    assert asks_when(query)


@pytest.mark.parametrize(
    "query",
    ["What did she say when he left?", "Who is Caroline?", "weekend plans", "What did Nate make on 9 November, 2022?"],
)
def test_questions_that_do_not(query: str):
    assert not asks_when(query)


def test_absolute_windows_day_month_year():
    assert valid_time_window("What did Nate make on 9 November, 2022?") == ValidTimeWindow(
        ms(2022, 11, 9), ms(2022, 11, 10), "on 9 November, 2022", "day"
    )
    assert valid_time_window("Who did Nate invite in June 2022?")[:2] == (ms(2022, 6, 1), ms(2022, 7, 1))
    assert valid_time_window("What did Tim learn in December 2023?")[:2] == (ms(2023, 12, 1), ms(2024, 1, 1))
    assert valid_time_window("How often did she go to the beach in 2023?")[:2] == (ms(2023, 1, 1), ms(2024, 1, 1))
    # the narrowest expression wins
    assert valid_time_window("In 2023, what happened on May 23, 2023?")[3] == "day"


@pytest.mark.parametrize(
    "query",
    [
        "What did Joanna find last week?",
        "Which spot did Joanna visit in May?",
        "What did she write yesterday?",
        "mach number 5 flow over a flat plate",
        "",
    ],
)
def test_relative_or_no_dates_name_no_window(query: str):
    assert valid_time_window(query) is None


def test_only_what_a_profile_reads_is_parsed():
    query = "When did Nate make a cake in May 2022?"
    assert read_query_time(query, when=False, window=False) == (False, None)
    assert read_query_time(query, when=True, window=False) == (True, None)
    assert read_query_time(query, when=False, window=True).window.period == "month"


def test_when_questions_add_the_words_that_date_an_event(tmp_path: Path):
    index = LexicalIndex(tmp_path / "lexical")
    weights = LexicalConfig(when_terms_weight=0.5)
    plain = index.query_terms("When did Ann go to the fair last week?", weights)
    assert plain == dict.fromkeys(["when", "did", "ann", "go", "to", "the", "fair", "last", "week"], 1.0)
    terms = index.query_terms("When did Ann go to the fair last week?", weights, asks_when=True)
    assert terms["last"] == 1.0 and terms["week"] == 1.0  # the query's own words keep their weight
    assert terms["yesterday"] == 0.5 and terms["month"] == 0.5 and terms["friday"] == 0.5
    assert "may" not in terms  # a modal verb more often than a month
    off = index.query_terms("When did Ann go to the fair?", LexicalConfig(), asks_when=True)
    assert "yesterday" not in off  # weight 0: nothing added
    # The turn that dates the event outranks the one that only names it (which, shorter,
    # ranks first in plain BM25); the other turn's score does not move.
    index.apply(
        "A",
        upserts=[
            doc("A", "named", "Ann: the fair was fun"),
            doc("A", "dated", "Ann: the fair was fun yesterday"),
            *(doc("A", f"other{k}", f"Bob: note {k} on the garden") for k in range(6)),
        ],
        removals=[],
        through_cursor=8,
    )
    query = "When did Ann go to the fair?"
    plain_hits = {h.record_id: h.score for h in index.search("A", query, weights, 10)}
    when_hits = {h.record_id: h.score for h in index.search("A", query, weights, 10, asks_when=True)}
    assert plain_hits["named"] > plain_hits["dated"] and when_hits["dated"] > when_hits["named"]
    assert when_hits["named"] == plain_hits["named"]
    index.close()


def test_fusion_boosts_candidates_valid_inside_the_window():
    config = ProfileConfig(channels=(LEXICAL,), valid_time=ValidTimeConfig(window_boost=0.3))
    hits = [
        LexicalHit("june", 10.0, ms(2022, 6, 10)),
        LexicalHit("july", 9.0, ms(2022, 7, 2)),
        LexicalHit("edge", 8.0, ms(2022, 7, 1)),
    ]
    july = ValidTimeWindow(ms(2022, 7, 1), ms(2022, 8, 1), "in July 2022", "month")
    assert [c.record_id for c in fuse(hits, None, {}, config, ms(2022, 8, 1))] == ["june", "july", "edge"]
    ranked = fuse(hits, None, {}, config, ms(2022, 8, 1), july)
    assert [c.record_id for c in ranked] == ["july", "edge", "june"]  # [from, to): July 1st is inside
    without = {c.record_id: c.final_score for c in fuse(hits, None, {}, config, ms(2022, 8, 1))}
    for c in ranked:
        assert c.final_score == pytest.approx(without[c.record_id] + (0.3 if c.record_id != "june" else 0.0))
    # A profile without the boost ignores the window.
    assert [c.record_id for c in fuse(hits, None, {}, ProfileConfig(channels=(LEXICAL,)), ms(2022, 8, 1), july)] == [
        "june",
        "july",
        "edge",
    ]


def test_the_shipped_profiles_read_time_and_the_evaluation_channels_stay_pure():
    from engram.eval.relevance import SEMANTIC_ONLY
    from engram.ranking import HYBRID_PROFILE

    for profile in (LEXICAL_PROFILE, HYBRID_PROFILE):
        assert profile.config.reads_query_time
        assert profile.config.lexical.when_terms_weight == 0.5 and profile.config.valid_time.window_boost == 0.5
    assert (LEXICAL_PROFILE.version, HYBRID_PROFILE.version) == ("7", "18")
    assert SEMANTIC_ONLY.config.valid_time.window_boost == 0.0  # the channel's own order
