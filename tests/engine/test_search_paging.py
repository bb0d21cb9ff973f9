"""Search: paging over a pinned snapshot, stale cursors, revalidation between pages, the
packet budget, oversized records, the semantic channel requirement, and the receipt."""

from __future__ import annotations

import base64
import json
import time

import pytest
from engine_support import (
    CAPTURE,
    PURPOSE,
    SEARCH,
    ErrorCode,
    HashingTestEncoder,
    accept,
    admit,
    capture,
    capture_args,
    context,
    error_of,
    forget,
    get,
    open_engine,
    search,
    search_ids,
)

from engram.models.envelope import success_size
from engram.models.outputs import SearchOutput
from engram.service.engine.clock import instant, now_ms

PAGING = context(workspace="paging")
TOTAL = 25


@pytest.fixture(scope="module")
def paged(fast_tmp):
    """An engine holding 25 records that all match "marmot"."""
    eng = open_engine(fast_tmp.mktemp("paging"))
    ids = [
        accept(eng, PAGING, f"The marmot shard {i} keeps ledger partition {i} warm.", t=1_700_000_000_000 + i * 1000)
        for i in range(TOTAL)
    ]
    yield eng, ids
    eng.close()


def all_pages(eng, ctx, query: str, **kwargs) -> list[dict]:
    pages = [search(eng, ctx, query, **kwargs)]
    while "next_page_cursor" in pages[-1]:
        assert len(pages) < 60, "paging does not terminate"
        pages.append(search(eng, ctx, query, page_cursor=pages[-1]["next_page_cursor"], **kwargs))
    return pages


def test_limit_paging_has_no_repeats_and_no_skips(paged) -> None:
    eng, ids = paged
    pages = all_pages(eng, PAGING, "marmot", limit=10)
    assert [len(p["records"]) for p in pages] == [10, 10, 5]
    packets = [packet for page in pages for packet in page["records"]]
    got = [p["record"]["record_id"] for p in packets]
    assert len(got) == len(set(got)) == TOTAL and set(got) == set(ids)
    assert [p["rank"] for p in packets] == list(range(1, TOTAL + 1))
    scores = [p["score"] for p in packets]
    assert scores == sorted(scores, reverse=True)
    receipts = [p["rank_receipt"] for p in pages]
    for field in ("snapshot_id", "system_as_of", "valid_as_of", "profile_config_digest", "snapshot_digest"):
        assert len({r[field] for r in receipts}) == 1, field
    assert [r["page_offset"] for r in receipts] == [0, 10, 20]
    for page in pages:
        SearchOutput.model_validate(page)
        assert [c["record_id"] for c in page["rank_receipt"]["contributions"]] == [
            p["record"]["record_id"] for p in page["records"]
        ]


def test_one_page_when_everything_fits(paged) -> None:
    eng, ids = paged
    out = search(eng, PAGING, "marmot", limit=50)
    assert "next_page_cursor" not in out and len(out["records"]) == TOTAL


def test_no_match_is_an_empty_list(paged) -> None:
    eng, _ = paged
    out = search(eng, context(workspace="nothing-here"), "marmot")
    assert out["records"] == [] and "next_page_cursor" not in out
    SearchOutput.model_validate(out)


@pytest.mark.parametrize(
    "change",
    [
        {"query": "marmot shard"},
        {"limit": 9},
        {"max_packet_bytes": 60_000},
        {"capability_policy": {"minimum_channels": "lexical", "network": "allow"}},
    ],
)
def test_changed_request_with_a_cursor_is_stale(paged, change) -> None:
    eng, _ = paged
    first = search(eng, PAGING, "marmot", limit=10)
    args = {"query": "marmot", "purpose_ref": PURPOSE, "limit": 10, "page_cursor": first["next_page_cursor"], **change}
    assert error_of(eng.execute, SEARCH, PAGING, args).code is ErrorCode.STALE_PAGE


def test_cursor_is_bound_to_the_purpose(paged) -> None:
    eng, _ = paged
    first = search(eng, PAGING, "marmot", limit=10)
    other = context(workspace="paging")
    other = type(other)(**{**other.__dict__, "purpose": "purpose:other"})
    args = {"query": "marmot", "purpose_ref": PURPOSE, "limit": 10, "page_cursor": first["next_page_cursor"]}
    assert error_of(eng.execute, SEARCH, other, args).code is ErrorCode.STALE_PAGE


def tampered(cursor: str) -> list[str]:
    body, mac = cursor.split(".", 1)
    raw = json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
    forged = base64.urlsafe_b64encode(json.dumps({**raw, "p": 0, "r": 0}, separators=(",", ":")).encode())
    flipped_mac = mac[:-1] + ("0" if mac[-1] != "0" else "1")
    return [
        body + "." + flipped_mac,
        forged.decode().rstrip("=") + "." + mac,
        body,
        "." + mac,
        cursor + "x",
        "x" + cursor,
        "not-a-cursor",
        "a.b.c",
        cursor.upper(),
    ]


def test_tampered_cursor_is_stale(paged) -> None:
    eng, _ = paged
    first = search(eng, PAGING, "marmot", limit=10)
    for bad in tampered(first["next_page_cursor"]):
        err = error_of(search, eng, PAGING, "marmot", limit=10, page_cursor=bad)
        assert err.code is ErrorCode.STALE_PAGE, bad
    # the genuine cursor still works
    assert len(search(eng, PAGING, "marmot", limit=10, page_cursor=first["next_page_cursor"])["records"]) == 10


def test_cursor_does_not_survive_a_restart(tmp_path) -> None:
    ctx = context()
    eng = open_engine(tmp_path / "d")
    for i in range(3):
        accept(eng, ctx, f"The dormouse batch {i} rotates.")
    cursor = search(eng, ctx, "dormouse", limit=1)["next_page_cursor"]
    eng.close()
    eng = open_engine(tmp_path / "d")
    try:
        assert error_of(search, eng, ctx, "dormouse", limit=1, page_cursor=cursor).code is ErrorCode.STALE_PAGE
    finally:
        eng.close()


def test_forgotten_between_pages_is_not_disclosed(engine) -> None:
    ctx = context()
    ids = [accept(engine, ctx, f"The vole report {i} lists open incidents.") for i in range(12)]
    first = search(engine, ctx, "vole report", limit=4)
    seen = [p["record"]["record_id"] for p in first["records"]]
    rest = [rid for rid in ids if rid not in seen]
    gone = rest[::2]
    for rid in gone:
        forget(engine, ctx, rid)
    later = []
    cursor = first["next_page_cursor"]
    ranks = [p["rank"] for p in first["records"]]
    while cursor:
        page = search(engine, ctx, "vole report", limit=4, page_cursor=cursor)
        later += [p["record"]["record_id"] for p in page["records"]]
        ranks += [p["rank"] for p in page["records"]]
        cursor = page.get("next_page_cursor")
    assert not set(later) & set(gone)
    assert sorted(later) == sorted(set(rest) - set(gone))
    assert ranks == list(range(1, len(ranks) + 1))


def test_packet_budget_splits_pages(paged) -> None:
    eng, ids = paged
    budget = 9_000
    pages = all_pages(eng, PAGING, "marmot", limit=10, max_packet_bytes=budget)
    assert len(pages[0]["records"]) < 10 and "next_page_cursor" in pages[0]
    for page in pages:
        assert success_size(page) <= budget
        assert page["records"], "every page but an exhausted one carries a record"
    got = [p["record"]["record_id"] for page in pages for p in page["records"]]
    assert len(got) == len(set(got)) == TOTAL
    assert [p["rank"] for page in pages for p in page["records"]] == list(range(1, TOTAL + 1))
    # the default budget carries more per page
    assert len(search(eng, PAGING, "marmot", limit=10)["records"]) > len(pages[0]["records"])


def big_text(n_bytes: int) -> str:
    words = "the giraffe ledger entry keeps a long narrative of partition moves "
    text = (words * (n_bytes // len(words) + 1))[:n_bytes].strip()
    return text


def test_one_oversized_record_is_projection_oversized(engine) -> None:
    ctx = context()
    rid = accept(engine, ctx, big_text(60_000))
    err = error_of(search, engine, ctx, "giraffe ledger", max_packet_bytes=4096)
    assert err.code is ErrorCode.PROJECTION_OVERSIZED
    assert error_of(get, engine, ctx, rid, max_packet_bytes=4096).code is ErrorCode.PROJECTION_OVERSIZED
    out = search(engine, ctx, "giraffe ledger", max_packet_bytes=1_048_576)
    assert [p["record"]["record_id"] for p in out["records"]] == [rid]
    assert success_size(out) > 60_000
    assert get(engine, ctx, rid, max_packet_bytes=1_048_576)["record"]["record_id"] == rid


def test_a_small_record_before_a_huge_one_is_returned_alone(engine) -> None:
    ctx = context()
    small = accept(engine, ctx, "giraffe giraffe giraffe ledger ledger: the short summary.")
    big = accept(engine, ctx, big_text(30_000))
    out = search(engine, ctx, "giraffe ledger", max_packet_bytes=8192, limit=5)
    ids = [p["record"]["record_id"] for p in out["records"]]
    assert ids == [small] and "next_page_cursor" in out
    assert success_size(out) <= 8192
    err = error_of(
        search, engine, ctx, "giraffe ledger", max_packet_bytes=8192, limit=5, page_cursor=out["next_page_cursor"]
    )
    assert err.code is ErrorCode.PROJECTION_OVERSIZED
    assert big not in ids


def test_semantic_channel_down(tmp_path) -> None:
    ctx = context()
    eng = open_engine(tmp_path / "lexical-only", load_model=False)
    try:
        assert eng.deps.ranker.semantic_health() is not None
        rid = accept(eng, ctx, "The badger index rebuilds nightly.")
        hybrid = {"minimum_channels": "lexical_and_semantic", "network": "forbid"}
        err = error_of(search, eng, ctx, "badger index", capability_policy=hybrid)
        assert err.code is ErrorCode.RANKING_UNAVAILABLE and err.retriable
        out = search(eng, ctx, "badger index")
        assert [p["record"]["record_id"] for p in out["records"]] == [rid]
        assert out["rank_receipt"]["channels"] == ["lexical"]
        contribution = out["rank_receipt"]["contributions"][0]
        assert contribution["semantic_rank"] is None and contribution["lexical_rank"] == 1
        lexical = {"minimum_channels": "lexical", "network": "forbid"}
        assert search(eng, ctx, "badger index", capability_policy=lexical)["rank_receipt"]["channels"] == ["lexical"]
    finally:
        eng.close()


def test_semantic_channel_up(engine) -> None:
    ctx = context()
    rid = accept(engine, ctx, "The badger index rebuilds nightly.")
    hybrid = {"minimum_channels": "lexical_and_semantic", "network": "forbid"}
    out = search(engine, ctx, "badger index", capability_policy=hybrid)
    assert out["records"][0]["record"]["record_id"] == rid
    assert out["rank_receipt"]["channels"] == ["lexical", "semantic"]
    contribution = out["rank_receipt"]["contributions"][0]
    assert contribution["semantic_rank"] == 1 and contribution["lexical_rank"] == 1
    # network "allow" grants nothing more
    allow = {"minimum_channels": "lexical_and_semantic", "network": "allow"}
    same = search(engine, ctx, "badger index", capability_policy=allow)
    assert [p["record"]["record_id"] for p in same["records"]] == [p["record"]["record_id"] for p in out["records"]]
    assert same["rank_receipt"]["profile"] == out["rank_receipt"]["profile"]


RECEIPT_FIELDS = {
    "request_digest",
    "authorization_receipt_digest",
    "profile",
    "profile_version",
    "profile_config_digest",
    "valid_as_of",
    "system_as_of",
    "snapshot_id",
    "snapshot_digest",
    "candidate_count",
    "candidate_ids_digest",
    "scoring_formula_ref",
    "ordered_ids_digest",
    "revalidation_receipt_digest",
    "projection_receipt_digests",
    "issued_at",
    "receipt_digest",
}


def test_receipt_and_packets_carry_every_contract_field(paged) -> None:
    eng, ids = paged
    out = search(eng, PAGING, "marmot", limit=3)
    SearchOutput.model_validate(out)
    assert set(out) == {"records", "rank_receipt", "next_page_cursor", "response_digest"}
    receipt = out["rank_receipt"]
    assert RECEIPT_FIELDS <= set(receipt)
    assert receipt["system_as_of"] == str(eng.deps.store.scope_cursor(PAGING.scope))
    assert receipt["candidate_count"] >= TOTAL
    assert len(receipt["projection_receipt_digests"]) == len(receipt["channels"])
    for packet in out["records"]:
        assert set(packet) == {"record", "redacted_fields", "redaction_receipt_digest", "score", "rank"}
        assert packet["record"]["record_id"] in ids
        assert packet["record"]["state"] == "accepted_current"


def test_pending_candidates_are_never_searchable(engine) -> None:
    ctx = context()
    capture(engine, ctx, "The lemming draft is not admitted yet.")
    assert search(engine, ctx, "lemming draft")["records"] == []
    assert error_of(search, engine, ctx, "x" * 10, limit=51).code is ErrorCode.INVALID_SCHEMA


def test_retention_expiry_between_pages_is_enforced(engine) -> None:
    """Pages reuse the pinned valid_as_of for valid time, but a retention expiry is a
    deadline for disclosure: a record that expired after page one is not on page two."""
    ctx = context()
    expires = now_ms() + 2000
    for i in range(3):
        args = capture_args(f"The tern rota {i} expires soon.")
        args["payload"]["retention"] = {"derivative_rule": "make-ineligible", "expires_at": instant(expires)}
        admit(engine, ctx, engine.execute(CAPTURE, ctx, args)["candidate_id"])
    first = search(engine, ctx, "tern rota", limit=1)
    assert now_ms() < expires, "the first page must be served before the expiry"
    assert len(first["records"]) == 1 and "next_page_cursor" in first
    time.sleep(max(0, expires - now_ms()) / 1000 + 0.05)
    later = search(engine, ctx, "tern rota", limit=1, page_cursor=first["next_page_cursor"])
    assert later["records"] == []


class FlakyEncoder:
    """The hashing encoder, failing on demand (a model that crashed)."""

    def __init__(self) -> None:
        self.inner = HashingTestEncoder()
        self.dim = self.inner.dim
        self.failing = False

    def encode(self, texts):
        if self.failing:
            raise RuntimeError("model crashed")
        return self.inner.encode(texts)


def test_semantic_failure_is_never_a_silent_fallback(tmp_path) -> None:
    ctx = context()
    encoder = FlakyEncoder()
    eng = open_engine(tmp_path / "flaky", encoder=encoder)
    hybrid = {"minimum_channels": "lexical_and_semantic", "network": "forbid"}
    try:
        first = accept(eng, ctx, "The gannet feed is refreshed hourly.")
        assert search(eng, ctx, "gannet feed", capability_policy=hybrid)["rank_receipt"]["channels"] == [
            "lexical",
            "semantic",
        ]
        encoder.failing = True
        second = accept(eng, ctx, "The gannet archive is refreshed daily.")  # semantic projection lags
        err = error_of(search, eng, ctx, "gannet", capability_policy=hybrid)
        assert err.code is ErrorCode.RANKING_UNAVAILABLE
        out = search(eng, ctx, "gannet")
        assert out["rank_receipt"]["channels"] == ["lexical"]
        assert {p["record"]["record_id"] for p in out["records"]} == {first, second}
        # the model comes back: the semantic projection catches up and serves again
        encoder.failing = False
        out = search(eng, ctx, "gannet", capability_policy=hybrid)
        assert out["rank_receipt"]["channels"] == ["lexical", "semantic"]
        assert {p["record"]["record_id"] for p in out["records"]} == {first, second}
        assert {c["record_id"] for c in out["rank_receipt"]["contributions"] if c["semantic_rank"] is not None} == {
            first,
            second,
        }
    finally:
        eng.close()


def test_records_added_between_pages_do_not_shift_the_snapshot(engine) -> None:
    ctx = context()
    ids = [accept(engine, ctx, f"The puffin roster {i} is current.") for i in range(6)]
    first = search(engine, ctx, "puffin roster", limit=3)
    added = accept(engine, ctx, "The puffin roster extra is new.")
    second = search(engine, ctx, "puffin roster", limit=3, page_cursor=first["next_page_cursor"])
    got = [p["record"]["record_id"] for p in first["records"] + second["records"]]
    assert sorted(got) == sorted(ids) and added not in got
    assert "next_page_cursor" not in second
    assert added in search_ids(engine, ctx, "puffin roster", limit=10)


@pytest.mark.parametrize("release", ["earlier", "later"])
def test_a_shared_snapshot_another_release_wrote_keeps_the_digest_it_was_ranked_with(release) -> None:
    """Replicas share snapshots through the store; during an upgrade one release pages
    through a list another ranked. Its profile dict then lacks a field this release has
    (an earlier writer: here v11, before `exact_up_to`) or has one this release lacks (a
    later writer). Either reads back, and every page names the configuration digest of
    the dict as written, which is what that release's first page reported."""
    from engram.ranking import HYBRID_PROFILE, RankedList, config_dict_digest
    from engram.service.engine.paging import SnapshotCache, _decode_snapshot, _encode_snapshot  # noqa: PLC2701

    ranked = RankedList(profile=HYBRID_PROFILE, channels=("lexical", "semantic"), candidates=[], candidate_ids=[])
    snap = SnapshotCache().put("acme", ranked, 7, 1_700_000_000_000)
    assert snap.profile_config_digest == HYBRID_PROFILE.config_digest()
    body = json.loads(_encode_snapshot(snap))
    semantic = body["profile"]["config"]["semantic"]
    if release == "earlier":
        del semantic["exact_up_to"]
        body["profile"]["version"] = "11"
    else:
        semantic["a_later_knob"] = 3
    written = config_dict_digest(body["profile"]["config"])
    assert written != HYBRID_PROFILE.config_digest()
    again = _decode_snapshot(snap.snapshot_id, json.dumps(body))
    assert again.profile_config_digest == written
    assert again.digests.snapshot_digest != snap.digests.snapshot_digest  # it names the written digest
    assert again.ranked.profile.version == body["profile"]["version"]


def test_a_fused_list_reads_back_from_a_shared_snapshot_with_the_same_digests() -> None:
    """A shared store keeps the whole fused list (every contribution, not only the pages
    served), and a replica reading it back names the same ordered ids and digests."""
    from engram.ranking import HYBRID_PROFILE, RankedList, fuse
    from engram.ranking.lexical import LexicalHit
    from engram.ranking.semantic import SemanticHit
    from engram.service.engine.paging import SnapshotCache, _decode_snapshot, _encode_snapshot  # noqa: PLC2701

    fused = fuse(
        [LexicalHit("mem_a", 3.0, 0), LexicalHit("mem_b", 1.0, 5)],
        [SemanticHit("mem_b", 0.8, 5), SemanticHit("mem_c", 0.7, 9)],
        {"mem_a": 0.2},
        HYBRID_PROFILE.config,
        1_700_000_000_000,
    )
    from engram.ranking.query_time import QueryTime, ValidTimeWindow

    window = ValidTimeWindow(1_699_920_000_000, 1_700_006_400_000, "on 14 November 2023", "day")
    ranked = RankedList(
        profile=HYBRID_PROFILE,
        channels=("lexical", "semantic"),
        candidates=fused,
        candidate_ids=sorted(fused.ids),
        query_time=QueryTime(True, window),
    )
    snap = SnapshotCache().put("acme", ranked, 7, 1_700_000_000_000)
    again = _decode_snapshot(snap.snapshot_id, _encode_snapshot(snap))
    assert again.ranked.query_time == QueryTime(True, window)
    assert again.ranked.candidates == list(fused) and len(fused) == 3
    assert list(again.ranked.ordered_ids) == list(ranked.ordered_ids) == [c.record_id for c in fused]
    assert again.digests == snap.digests


def test_a_dated_query_ranks_records_valid_that_day_first_and_every_page_names_the_window(engine) -> None:
    """ "...on 9 November, 2022": the records valid that day come first, and the receipt of
    each page (the second read from the snapshot) names the window the profile boosted."""
    ctx = context(workspace="dated")
    day = 1_667_952_000_000  # 2022-11-09T00:00:00Z
    other = [
        accept(engine, ctx, f"Nate baked a walnut cake for the party {i}.", t=day - 40 * 86_400_000 + i)
        for i in range(4)
    ]
    that_day = [accept(engine, ctx, f"Nate made a cake {i}.", t=day + 3_600_000 * (i + 1)) for i in range(2)]
    first = search(engine, ctx, "What cake did Nate bake on 9 November, 2022?", limit=2)
    second = search(
        engine, ctx, "What cake did Nate bake on 9 November, 2022?", limit=2, page_cursor=first["next_page_cursor"]
    )
    assert sorted(p["record"]["record_id"] for p in first["records"]) == sorted(that_day)
    assert {p["record"]["record_id"] for p in second["records"]} <= set(other)
    window = {
        "valid_from": instant(day),
        "valid_until": instant(day + 86_400_000),
        "text": "on 9 November, 2022",
        "period": "day",
    }
    for page in (first, second):
        SearchOutput.model_validate(page)
        assert page["rank_receipt"]["query_time"] == {"asks_when": False, "valid_time_window": window}
    plain = search(engine, ctx, "When did Nate bake a cake?", limit=2)["rank_receipt"]["query_time"]
    assert plain == {"asks_when": True, "valid_time_window": None}


def test_a_snapshot_written_before_query_time_reads_back_without_it() -> None:
    from engram.ranking import HYBRID_PROFILE, RankedList
    from engram.ranking.query_time import NO_TIME, QueryTime, ValidTimeWindow
    from engram.service.engine.paging import SnapshotCache, _decode_snapshot, _encode_snapshot  # noqa: PLC2701

    window = QueryTime(False, ValidTimeWindow(1, 2, "in 2023", "year"))
    ranked = RankedList(
        profile=HYBRID_PROFILE, channels=("lexical", "semantic"), candidates=[], candidate_ids=[], query_time=window
    )
    snap = SnapshotCache().put("acme", ranked, 7, 1_700_000_000_000)
    body = json.loads(_encode_snapshot(snap))
    assert _decode_snapshot(snap.snapshot_id, json.dumps(body)).ranked.query_time == window
    del body["query_time"]
    assert _decode_snapshot(snap.snapshot_id, json.dumps(body)).ranked.query_time == NO_TIME
