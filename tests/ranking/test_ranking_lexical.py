"""The lexical channel's per-scope indexes: isolation of scores and files, cache, threads."""

from __future__ import annotations

import dataclasses
import hashlib
import shutil
import threading
from pathlib import Path

import pytest
from ranking_support import doc

from engram.ranking import record_words
from engram.ranking.lexical import INDEX_DIR, LEGACY_INDEX_DIRS, LexicalIndex
from engram.ranking.profiles import LEXICAL_PROFILE, FieldWeights, LexicalConfig

WEIGHTS = LEXICAL_PROFILE.config.lexical
SECRET = "zyxquorblat"


def scope_dir(root: Path, scope: str) -> Path:
    return root / hashlib.sha256(scope.encode()).hexdigest()[:32]


def snapshot(directory: Path) -> dict[str, tuple[int, bytes]]:
    return {
        str(p.relative_to(directory)): (p.stat().st_mtime_ns, p.read_bytes())
        for p in sorted(directory.rglob("*"))
        if p.is_file()
    }


def seed_a(index: LexicalIndex) -> None:
    index.apply(
        "A",
        upserts=[
            doc("A", "a1", "deploy the payment service on friday", decision="blue green rollout"),
            doc("A", "a2", "payment cache warms slowly", evidence="cache metrics"),
            doc("A", "a3-purged-zq", f"the {SECRET} payment incident report", context="postmortem"),
            doc("A", "a4", "unrelated note about lunch"),
        ],
        removals=[],
        through_cursor=4,
    )


def lines_index(tmp_path: Path, **lines: str) -> LexicalIndex:
    """An index of scope A holding one record per line, named by its keyword."""
    index = LexicalIndex(tmp_path / "lexical")
    index.apply("A", upserts=[doc("A", rid, text) for rid, text in lines.items()], removals=[], through_cursor=1)
    return index


def scored(index: LexicalIndex, scope: str, query: str) -> list[tuple[str, float]]:
    return [(h.record_id, h.score) for h in index.search(scope, query, WEIGHTS, 100)]


def test_scores_in_one_scope_ignore_other_scopes(tmp_path: Path):
    """BM25 statistics are per scope: B's documents sharing the query terms change
    neither A's scores nor A's order (a shared index fails this: df and avgdl move)."""
    alone = LexicalIndex(tmp_path / "alone")
    seed_a(alone)
    crowded = LexicalIndex(tmp_path / "crowded")
    crowded.apply(
        "B",
        upserts=[doc("B", f"b{i}", f"payment cache service payment {'filler ' * (i % 9)}") for i in range(300)],
        removals=[],
        through_cursor=1,
    )
    seed_a(crowded)
    for query in ("payment cache", "payment service friday", "incident"):
        expected = scored(alone, "A", query)
        assert expected and scored(crowded, "A", query) == expected
    assert all(r.startswith("b") for r, _ in scored(crowded, "B", "payment"))
    alone.close()
    crowded.close()


def test_purge_rewrites_only_its_scope(tmp_path: Path):
    root = tmp_path / "lexical"
    index = LexicalIndex(root)
    seed_a(index)
    index.apply(
        "B", upserts=[doc("B", f"b{i}", f"payment ledger entry {i}") for i in range(50)], removals=[], through_cursor=1
    )
    index.apply(
        "B", upserts=[doc("B", "b50", "late payment ledger entry")], removals=[], through_cursor=2
    )  # two segments
    before_b = snapshot(scope_dir(root, "B"))
    assert any(SECRET.encode() in data for _, data in snapshot(scope_dir(root, "A")).values())

    index.apply("A", upserts=[], removals=["a3-purged-zq"], through_cursor=5)
    index.purge("A", ["a3-purged-zq"])

    assert snapshot(scope_dir(root, "B")) == before_b
    leftovers = [
        p
        for p in root.rglob("*")
        if p.is_file() and (SECRET.encode() in p.read_bytes() or b"a3-purged-zq" in p.read_bytes())
    ]  # a short id would match hex segment names
    assert leftovers == []
    assert {r for r, _ in scored(index, "A", "payment")} == {"a1", "a2"}
    assert len(scored(index, "B", "ledger")) == 51
    assert index.cursor("A") == 5 and index.cursor("B") == 2
    index.purge("never-written", ["x"])  # a no-op, and creates nothing
    assert not scope_dir(root, "never-written").exists()
    index.close()


def test_eviction_and_reopen_keep_documents_and_cursors(tmp_path: Path):
    root = tmp_path / "lexical"
    index = LexicalIndex(root, max_open=2, max_writers=1)
    scopes = [f"s{i}" for i in range(6)]
    for n, scope in enumerate(scopes, start=1):
        index.apply(
            scope, upserts=[doc(scope, f"{scope}_r", f"alpha note {scope}")], removals=[], through_cursor=n * 10
        )
        assert len(index._entries) <= 2  # noqa: SLF001
        assert len(index._writers) <= 1  # noqa: SLF001
    for n, scope in enumerate(scopes, start=1):  # every scope reopened after eviction
        assert [h.record_id for h in index.search(scope, "alpha", WEIGHTS, 10)] == [f"{scope}_r"]
        assert index.cursor(scope) == n * 10
        index.apply(
            scope, upserts=[doc(scope, f"{scope}_q", "beta note")], removals=[], through_cursor=n * 10 - 5
        )  # never backwards
        assert index.cursor(scope) == n * 10
        assert len(index._entries) <= 2  # noqa: SLF001
    index.close()
    reopened = LexicalIndex(root, max_open=3)
    for n, scope in enumerate(scopes, start=1):
        assert sorted(h.record_id for h in reopened.search(scope, "note", WEIGHTS, 10)) == [f"{scope}_q", f"{scope}_r"]
        assert reopened.cursor(scope) == n * 10
    reopened.close()


def test_concurrent_apply_to_several_scopes(tmp_path: Path):
    index = LexicalIndex(tmp_path / "lexical", max_open=2, max_writers=1)
    scopes = ["c0", "c1", "c2"]
    errors: list[BaseException] = []

    def writer(scope: str) -> None:
        try:
            for batch in range(8):
                docs = [doc(scope, f"{scope}_{batch}_{i}", f"gamma item {i} of {scope}") for i in range(20)]
                index.apply(scope, upserts=docs, removals=[], through_cursor=batch + 1)
        except BaseException as exc:  # noqa: BLE001 - surfaced by the assertion below
            errors.append(exc)

    def reader() -> None:
        try:
            for _ in range(40):
                for scope in scopes:
                    assert all(h.record_id.startswith(scope) for h in index.search(scope, "gamma", WEIGHTS, 500))
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(s,)) for s in scopes] + [threading.Thread(target=reader)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert errors == []
    for scope in scopes:
        assert len(index.search(scope, "gamma", WEIGHTS, 1000)) == 160
        assert index.cursor(scope) == 8
    index.close()


def test_unknown_scope_creates_nothing_and_empty_apply_only_moves_the_cursor(tmp_path: Path):
    root = tmp_path / "lexical"
    index = LexicalIndex(root)
    assert index.search("ghost", "anything at all", WEIGHTS, 10) == []
    assert index.cursor("ghost") == 0
    assert list(root.iterdir()) == []
    index.apply("quiet", upserts=[], removals=["nothing"], through_cursor=7)
    assert index.cursor("quiet") == 7
    assert not (scope_dir(root, "quiet") / INDEX_DIR).exists()
    assert index.search("quiet", "anything", WEIGHTS, 10) == []
    index.close()


def test_mixed_up_directory_returns_nothing_of_another_scope(tmp_path: Path):
    root = tmp_path / "lexical"
    index = LexicalIndex(root)
    seed_a(index)
    index.apply("B", upserts=[doc("B", "b1", "payment secrets of tenant b")], removals=[], through_cursor=1)
    index.close()
    shutil.rmtree(scope_dir(root, "A") / INDEX_DIR)
    shutil.copytree(scope_dir(root, "B") / INDEX_DIR, scope_dir(root, "A") / INDEX_DIR)
    reopened = LexicalIndex(root)
    assert reopened.search("A", "payment secrets", WEIGHTS, 10) == []
    reopened.close()


def test_reset_drops_every_scope_and_legacy_files_are_removed(tmp_path: Path):
    root = tmp_path / "lexical"
    root.mkdir()
    (root / "meta.json").write_text("{}")  # the old shared-index layout
    (root / "0123.store").write_bytes(SECRET.encode())
    (tmp_path / "lexical_cursors.json").write_text('{"A": 9}')
    index = LexicalIndex(root)
    assert list(root.iterdir()) == [] and not (tmp_path / "lexical_cursors.json").exists()
    assert index.cursor("A") == 0
    seed_a(index)
    index.apply("B", upserts=[doc("B", "b1", "payment")], removals=[], through_cursor=3)
    index.reset()
    assert list(root.iterdir()) == []
    assert index.cursor("A") == 0 and index.cursor("B") == 0
    assert index.search("A", "payment", WEIGHTS, 10) == []
    seed_a(index)  # usable again after a reset
    assert len(index.search("A", "payment", WEIGHTS, 10)) == 3
    index.close()


@pytest.mark.parametrize("legacy", LEGACY_INDEX_DIRS)
def test_per_scope_index_of_an_older_layout_is_dropped_with_its_cursor(
    tmp_path: Path, legacy: str, caplog: pytest.LogCaptureFixture
):
    """Without id columns (``index``), the speaker field (``index-v2``) or word
    positions (``index-v3``). The operator is told, since the rebuild delays ready."""
    root = tmp_path / "lexical"
    index = LexicalIndex(root)
    seed_a(index)
    index.close()
    LexicalIndex(root).close()
    assert "older layout" not in caplog.text  # a current index is opened in silence
    (scope_dir(root, "A") / INDEX_DIR).rename(scope_dir(root, "A") / legacy)  # the old layout
    reopened = LexicalIndex(root)
    assert "1 scope index(es) of an older layout deleted" in caplog.text
    assert not (scope_dir(root, "A") / legacy).exists()
    assert reopened.cursor("A") == 0  # so the projector re-applies the scope's journal
    seed_a(reopened)
    assert len(reopened.search("A", "payment", WEIGHTS, 10)) == 3
    reopened.close()


def test_a_named_speaker_lifts_what_that_person_said(tmp_path: Path):
    """A question naming a person ranks that person's own line above a line said to them
    once the speaker field weighs; at weight 0 the speaker field changes nothing."""
    index = lines_index(
        tmp_path,
        said="Caroline: I went to the support group yesterday.",
        told="Melanie: Caroline, the support group sounds great!",
        other="Melanie: I painted a sunrise by the lake.",
    )
    query = "What did Caroline say about the support group?"
    unweighted = dataclasses.replace(WEIGHTS, field_weights=FieldWeights(speaker=0.0))
    weighted = dataclasses.replace(WEIGHTS, field_weights=FieldWeights(speaker=6.0))
    plain = [h.record_id for h in index.search("A", query, unweighted, 10)]
    assert plain[0] == "told"  # two mentions of the name, the shorter line: plain BM25's pick
    assert [h.record_id for h in index.search("A", query, weighted, 10)][:2] == ["said", "told"]
    # the speaker field holds names only: a query naming no speaker is ranked as without it
    for text in ("support group", "painted sunrise"):
        assert index.search("A", text, weighted, 10) == index.search("A", text, unweighted, 10)
    index.purge("A", ["other"])  # a purge rewrites the index from stored fields, speaker too
    assert [h.record_id for h in index.search("A", query, weighted, 10)][:2] == ["said", "told"]
    index.close()


def test_canonical_and_other_ids_come_back_exactly_also_after_a_purge(tmp_path: Path):
    canonical = [record_words.unpack((i, 2**64 - 1 - i, 7 * i, 2**63 + i)) for i in range(3)]
    index = LexicalIndex(tmp_path / "lexical")
    docs = [doc("A", rid, f"ledger payment note {n}") for n, rid in enumerate([*canonical, "plain-id", "mem_short"])]
    index.apply("A", upserts=docs, removals=[], through_cursor=1)
    found = {h.record_id for h in index.search("A", "ledger payment", WEIGHTS, 10)}
    assert found == {*canonical, "plain-id", "mem_short"}
    index.purge("A", [canonical[1]])
    found = {h.record_id for h in index.search("A", "ledger payment", WEIGHTS, 10)}
    assert found == {canonical[0], canonical[2], "plain-id", "mem_short"}
    index.close()


def test_short_queries_weigh_each_term_once_long_ones_drop_stop_words(tmp_path: Path):
    index = LexicalIndex(tmp_path / "lexical")
    # a question: every distinct term once, its function words at the question weight
    function_word = WEIGHTS.question_stopword_weight
    assert 0 < function_word < 1
    assert index.query_terms("What is on the list of the payments?", WEIGHTS) == {
        "what": function_word,
        "is": function_word,
        "on": function_word,
        "the": function_word,
        "list": 1.0,
        "of": function_word,
        "payment": 1.0,
    }
    # a question of nothing but function words weighs them all as words
    assert index.query_terms("Who was it?", WEIGHTS) == {"who": 1.0, "was": 1.0, "it": 1.0}
    plain = dataclasses.replace(WEIGHTS, question_stopword_weight=1.0)
    assert set(index.query_terms("What is on the list?", plain).values()) == {1.0}
    # a description: stop words dropped, a repeated content word weighs sqrt(count)
    long = "The effect of the payments on the ledger and the effect of late payments on " * 2
    assert len(index.tokens(long)) > WEIGHTS.long_query_tokens
    terms = index.query_terms(long, WEIGHTS)
    assert set(terms) == {"effect", "payment", "ledger", "late"}
    assert terms["effect"] == pytest.approx(4**WEIGHTS.long_query_count_power)
    assert terms["ledger"] == pytest.approx(2**WEIGHTS.long_query_count_power)
    only_stop = "to be or not to be " * 5
    assert set(index.query_terms(only_stop, WEIGHTS)) == {"to", "be", "or", "not"}  # nothing else left
    index.apply(
        "A",
        upserts=[doc("A", "w1", "to be or not to be"), doc("A", "w2", "payment effects report")],
        removals=[],
        through_cursor=1,
    )
    assert [h.record_id for h in index.search("A", "the effect of the payment", WEIGHTS, 10)] == ["w2"]
    assert [h.record_id for h in index.search("A", "not to be", WEIGHTS, 10)] == ["w1"]
    index.close()


def test_query_pairs_are_the_ranked_words_side_by_side(tmp_path: Path):
    index = LexicalIndex(tmp_path / "lexical")
    # a question: every token in order, stop words kept; each pair once, no word with itself
    assert index.query_pairs("Where is the dance studio, the dance studio?", WEIGHTS) == [
        ("where", "is"),
        ("is", "the"),
        ("the", "danc"),
        ("danc", "studio"),
        ("studio", "the"),
    ]
    assert index.query_pairs("payment payment", WEIGHTS) == []
    # a description pairs its content words, as it ranks by them
    long = "The effect of the payments on the ledger and the effect of late payments on " * 2
    assert index.query_pairs(long, WEIGHTS) == [
        ("effect", "payment"),
        ("payment", "ledger"),
        ("ledger", "effect"),
        ("effect", "late"),
        ("late", "payment"),
        ("payment", "effect"),
    ]
    assert index.query_pairs("Where is the dance studio?", dataclasses.replace(WEIGHTS, pair_weight=0.0)) == []
    index.close()


def test_query_words_side_by_side_rank_above_the_same_words_apart(tmp_path: Path):
    """Records of the same words, each once: those holding the query's two words side by
    side, swapped or with a word between (slop 2) rank above the one holding them four
    words apart once pairs weigh; without pairs their BM25 scores tie."""
    index = LexicalIndex(tmp_path / "lexical")
    index.apply(
        "A",
        upserts=[
            doc("A", "apart", "studio talk about a new dance"),
            doc("A", "together", "talk about a new dance studio"),
            doc("A", "swapped", "talk about a new studio dance"),
            doc("A", "between", "talk about dance a studio new"),
        ],
        removals=[],
        through_cursor=1,
    )
    off = dataclasses.replace(WEIGHTS, pair_weight=0.0)
    plain = {h.record_id: h.score for h in index.search("A", "dance studio", off, 10)}
    assert len(set(plain.values())) == 1  # one score for all four
    ranked = index.search("A", "dance studio", WEIGHTS, 10)
    assert [h.record_id for h in ranked][-1] == "apart"  # four words apart: beyond the slop
    near = {h.record_id: h.score for h in ranked[:3]}
    assert set(near) == {"together", "swapped", "between"}
    assert min(near.values()) > ranked[-1].score == pytest.approx(plain["apart"])
    index.purge("A", ["between"])  # a purge rewrites the index from stored fields, positions too
    assert [h.record_id for h in index.search("A", "dance studio", WEIGHTS, 10)][-1] == "apart"
    index.close()


def test_a_commit_cut_before_its_metadata_does_not_block_the_next(tmp_path: Path):
    """A kill between writing a deletes file and saving meta.json leaves that file
    behind; the reopened index reuses the opstamp in its name for its next commit,
    which must still succeed (and the deleted record be gone)."""
    root = tmp_path / "lexical"
    index = LexicalIndex(root)
    seed_a(index)
    index.close()
    directory = scope_dir(root, "A") / INDEX_DIR
    committed_meta = (directory / "meta.json").read_bytes()
    cut = LexicalIndex(root)  # a writer starting from the committed opstamp, as after a restart
    cut.apply("A", upserts=[], removals=["a4"], through_cursor=5)
    cut.close()
    orphans = {p.name for p in directory.glob("*.del")}
    assert orphans  # the cut commit's deletes file
    (directory / "meta.json").write_bytes(committed_meta)  # as if killed before the metadata was saved

    reopened = LexicalIndex(root)
    assert {r for r, _ in scored(reopened, "A", "lunch")} == {"a4"}  # the cut commit never happened
    reopened.apply("A", upserts=[], removals=["a4"], through_cursor=5)
    assert scored(reopened, "A", "lunch") == []
    assert {r for r, _ in scored(reopened, "A", "payment")} == {"a1", "a2", "a3-purged-zq"}
    reopened.close()


def test_a_question_ranks_the_record_holding_all_its_content_words_first(tmp_path: Path):
    """Plain BM25 puts the line of function words ("what did you do at the") first and
    scores the record holding every content word once below one saying a single word
    three times; light function words and the coordination clause put the record that
    answers the whole question first."""
    index = lines_index(
        tmp_path,
        all="Melanie: my pottery class meets at the dance studio on the corner every week after work",
        repeated="Caroline: studio, studio, studio!",
        pottery1="Caroline: pottery is fun",
        pottery2="Melanie: I love pottery",
        filler="Caroline: what did you do at the weekend?",
    )
    question = "What did Melanie do at the pottery studio?"
    assert index.query_content(question, WEIGHTS) == ["melani", "potteri", "studio"]
    plain = dataclasses.replace(WEIGHTS, coordination_weight=0.0, question_stopword_weight=1.0)
    light = dataclasses.replace(WEIGHTS, coordination_weight=0.0)

    def ranked(query: str, config: LexicalConfig) -> dict[str, float]:
        return {h.record_id: h.score for h in index.search("A", query, config, 10)}

    assert list(ranked(question, plain))[:2] == ["filler", "all"]
    assert list(ranked(question, WEIGHTS))[0] == "all"
    # Light function words lower the filler line; the clause lifts only the record
    # holding every content word: its content words' BM25 once more, times the weight.
    assert ranked(question, light)["filler"] < ranked(question, plain)["filler"]
    with_clause, without = ranked(question, WEIGHTS), ranked(question, light)
    assert {r for r in with_clause if with_clause[r] != pytest.approx(without[r])} == {"all"}
    both, one = ranked("pottery studio", WEIGHTS), ranked("pottery studio", light)
    assert both["all"] == pytest.approx(one["all"] * (1 + WEIGHTS.coordination_weight))
    assert both["repeated"] == pytest.approx(one["repeated"])
    # A description has no question content words, hence no clause.
    assert index.query_content("the pottery studio " * 10, WEIGHTS) == []
    index.close()
