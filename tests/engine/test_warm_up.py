"""Warm before ready: what the first calls would otherwise pay once is paid while the
engine opens (no call after /readyz pays a warm-up)."""

from __future__ import annotations

import shutil
import threading
import time

from engine_support import HashingTestEncoder, accept, context, open_engine, search_ids

from engram.ranking.semantic import SemanticIndex
from engram.service.engine.records import scope_key
from engram.service.secrets import scanner


def test_checkpoints_that_catching_up_made_due_are_saved_before_the_engine_is_ready(
    engine, data_dir, monkeypatch
) -> None:
    """A scope whose vector files are gone is projected again at warm-up, which makes its
    checkpoint due. Checkpoints are saved in the background, but the one warm-up made due
    is saved before the engine is ready, not beside the first searches after it."""
    ctx = context()
    rid = accept(engine, ctx, "The ferry timetable changes at the spring equinox.")
    engine.close()
    shutil.rmtree(data_dir / "index" / "semantic")
    saved = threading.Event()
    real = SemanticIndex._background_save

    def slow_background_save(self, scope_key):  # noqa: ANN001, ANN202
        time.sleep(0.3)  # a large scope's save takes a while
        real(self, scope_key)
        saved.set()

    monkeypatch.setattr(SemanticIndex, "_background_save", slow_background_save)
    reopened = open_engine(data_dir)
    try:
        assert saved.is_set()  # Engine.open returned (ready) only after the save
        assert reopened.readiness() == {"ready": True, "reasons": []}
        assert search_ids(reopened, ctx, "ferry timetable equinox") == [rid]
    finally:
        reopened.close()


def test_what_warm_up_replays_after_a_crash_is_saved_before_ready(engine, data_dir) -> None:
    """A crash loses the semantic changes made since the last checkpoint (at most 30 s or
    1,000 records of them); warm-up replays them from the journal. It saves them before
    ready, so a server killed again before its next checkpoint falls due does not replay
    them again at the next start (under repeated kills the backlog only grew, and each
    start took longer to become ready)."""
    ctx = context()
    accept(engine, ctx, "The ferry timetable changes at the spring equinox.")
    engine.ranker.checkpoint()
    engine.ranker.settle()  # a background save the capture made due is not half-written in the copy
    semantic = data_dir / "index" / "semantic"
    at_checkpoint = data_dir.parent / "semantic-at-checkpoint"
    shutil.copytree(semantic, at_checkpoint)
    later = [accept(engine, ctx, f"Harbour crane {n} is serviced every second Tuesday.") for n in range(3)]
    key = scope_key(ctx.scope)
    head = engine.scope_cursor(ctx.scope)
    engine.close()
    # The semantic files as a kill would leave them: the three later records unsaved.
    shutil.rmtree(semantic)
    shutil.copytree(at_checkpoint, semantic)
    assert SemanticIndex(semantic, HashingTestEncoder.dim).cursor(key) < head

    reopened = open_engine(data_dir)
    try:
        # The replay is on disk: read by a fresh index over the files, as the next start would.
        assert SemanticIndex(semantic, HashingTestEncoder.dim).cursor(key) == head
        assert set(later) <= set(search_ids(reopened, ctx, "harbour crane serviced tuesday"))
    finally:
        reopened.close()


def test_a_server_loads_what_the_first_call_needs_before_ready_and_a_command_does_not(data_dir) -> None:
    """detect-secrets' plugins and the query-time parser are imported and started by a
    server's warm-up, not by the first capture or search after ready; a command that
    makes no agent call (an ingest, an admin command) leaves them to load when first
    used, saving their seconds of start."""
    scanner.detector.cache_clear()
    command = open_engine(data_dir)
    try:
        assert scanner.detector.cache_info().currsize == 0
    finally:
        command.close()
    served = open_engine(data_dir, warm_calls=True)
    try:
        assert scanner.detector.cache_info().currsize == 1
        assert scanner.detector.cache_info().misses == 1
    finally:
        served.close()
