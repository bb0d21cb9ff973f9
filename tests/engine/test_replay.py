"""A rank receipt can be replayed: the same ranking pinned to its valid_as_of gives the
same ordered_ids_digest while the scope is unchanged, and says why when it is not."""

from __future__ import annotations

import pytest
from engine_support import SEARCH, ContractError, ErrorCode, accept, context

from engram.service.engine.clock import now_ms


def test_replay_matches_then_explains_a_change(engine) -> None:
    ctx = context()
    for i in range(6):
        accept(engine, ctx, f"harbour crane maintenance log entry {i}", t=now_ms() - i * 86_400_000)
    arguments = {"query": "harbour crane maintenance", "purpose_ref": ctx.purpose, "limit": 4}
    receipt = engine.execute(SEARCH, ctx, arguments)["rank_receipt"]

    same = engine.operator.replay_search(ctx, arguments, receipt)
    assert same["match"] and same["same_profile"] and same["journal_unchanged"]

    accept(engine, ctx, "harbour crane maintenance harbour crane maintenance checklist")
    moved = engine.operator.replay_search(ctx, arguments, receipt)
    assert not moved["journal_unchanged"]
    assert not moved["match"]  # the new, better-matching record leads the page now


def test_no_search_is_kept_until_a_console_asks(engine) -> None:
    ctx = context()
    accept(engine, ctx, "lighthouse lamp replacement schedule")
    arguments = {"query": "lighthouse lamp", "purpose_ref": ctx.purpose}
    receipt = engine.execute(SEARCH, ctx, arguments)["rank_receipt"]
    assert engine.operator.recent_search(receipt["receipt_digest"]) is None


def test_a_recent_search_is_kept_by_its_receipt_digest_for_a_replay(engine) -> None:
    ctx = context()
    accept(engine, ctx, "lighthouse lamp replacement schedule")
    arguments = {"query": "lighthouse lamp", "purpose_ref": ctx.purpose}
    engine.operator.keep_recent_searches()
    receipt = engine.execute(SEARCH, ctx, arguments)["rank_receipt"]
    kept = engine.operator.recent_search(receipt["receipt_digest"])
    assert kept is not None and kept.scope == ctx.scope and kept.receipt == receipt
    assert engine.operator.replay_search(ctx, kept.arguments, kept.receipt)["match"]
    assert engine.operator.recent_search("sha256:" + "0" * 64) is None


def test_recent_searches_keep_the_newest_only() -> None:
    from engram.service.engine.recent_searches import RecentSearches

    recent = RecentSearches()
    recent.keep(2)
    for n in range(3):
        recent.remember(("t", "w"), {"n": n}, {"receipt_digest": f"d{n}"})
    assert recent.get("d0") is None
    assert [recent.get(d).arguments for d in ("d1", "d2")] == [{"n": 1}, {"n": 2}]  # type: ignore[union-attr]


def test_replay_refuses_other_arguments(engine) -> None:
    ctx = context()
    accept(engine, ctx, "tidal gauge calibration")
    arguments = {"query": "tidal gauge", "purpose_ref": ctx.purpose}
    receipt = engine.execute(SEARCH, ctx, arguments)["rank_receipt"]
    with pytest.raises(ContractError) as caught:
        engine.operator.replay_search(ctx, {**arguments, "limit": 3}, receipt)
    assert caught.value.code == ErrorCode.DIGEST_CONFLICT


def test_replay_search_command(tmp_path) -> None:
    import json

    from typer.testing import CliRunner

    from engram.service.cli import app
    from engram.service.engine import Engine

    data = tmp_path / "data"
    ctx = context()
    engine = Engine.open(data, load_model=False)  # lexical-only, as the command opens it
    try:
        accept(engine, ctx, "ferry timetable for the winter season")
        arguments = {"query": "ferry timetable", "purpose_ref": ctx.purpose}
        receipt = engine.execute(SEARCH, ctx, arguments)["rank_receipt"]
    finally:
        engine.close()
    (tmp_path / "args.json").write_text(json.dumps(arguments))
    (tmp_path / "receipt.json").write_text(json.dumps(receipt))
    result = CliRunner().invoke(
        app,
        [
            "admin",
            "replay-search",
            ctx.tenant,
            ctx.workspace,
            str(tmp_path / "args.json"),
            str(tmp_path / "receipt.json"),
            "-d",
            str(data),
            "--no-model",
        ],
    )
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["match"] is True
