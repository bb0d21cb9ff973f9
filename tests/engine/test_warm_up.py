"""Warm before ready: what the first calls would otherwise pay once is paid while the
engine opens (issue 12: no call after /readyz pays a warm-up)."""

from __future__ import annotations

import shutil
import threading
import time

from engine_support import accept, context, open_engine, search_ids

from engram.ranking.semantic import SemanticIndex


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
