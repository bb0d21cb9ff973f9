"""A purge rewrites a scope's files beside its searches and applies: held in the middle
of either channel's rewrite (for the vectors, also while it writes the new generation's
files), the scope still takes changes and answers searches, and the rewrite that is
swapped in keeps those changes and holds no byte of the purged record."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from ranking_support import HashingTestEncoder, bytes_under, doc

from engram.ranking import HYBRID_PROFILE, LEXICAL_PROFILE, Ranker
from engram.ranking.profiles import Profile

SECRET = "vorqazhindrel"
SCOPE = "scopeA"
GONE_TEXT = f"the {SECRET} outage ledger of kestrel valley"
WAIT_S = 60  # deadlock guard only: every wait below ends as soon as its event happens


def ids(ranker: Ranker, query: str, profile: Profile) -> set[str]:
    return {c.record_id for c in ranker.search(SCOPE, query, profile, valid_as_of_ms=0).candidates}


def held(target: Any, name: str, reached: threading.Event, release: threading.Event) -> None:
    """Make ``target.name`` signal ``reached`` and wait for ``release`` before it runs."""
    original: Callable[..., Any] = getattr(target, name)

    def waiting(*args: Any, **kwargs: Any) -> Any:
        reached.set()
        release.wait(WAIT_S)
        return original(*args, **kwargs)

    setattr(target, name, waiting)


def vector_bytes(text: str) -> bytes:
    """The purged record's passage vector as the rows file stores it (float16)."""
    return HashingTestEncoder().encode([text])[0].astype(np.float16).tobytes()


@pytest.mark.parametrize(
    ("channel", "step"),
    [("_lexical", "_restore"), ("_semantic", "_fresh"), ("_semantic", "_write_generation")],
    ids=["lexical-copy", "semantic-rebuild", "semantic-save"],
)
def test_scope_changes_and_answers_while_a_purge_rewrites_it(tmp_path: Path, channel: str, step: str) -> None:
    root = tmp_path / "idx"
    ranker = Ranker(root, HashingTestEncoder())
    ranker.apply(
        SCOPE,
        upserts=[
            doc(SCOPE, "mem_keep", "harbour crane maintenance schedule"),
            doc(SCOPE, "mem_drop", "harbour tug radio frequencies"),
            doc(SCOPE, "mem_gone", GONE_TEXT),
        ],
        removals=[],
        through_cursor=3,
    )
    ranker.apply(SCOPE, upserts=[], removals=["mem_gone"], through_cursor=4)  # the forget's removal
    assert "mem_gone" not in ids(ranker, "kestrel valley outage ledger", HYBRID_PROFILE)
    assert bytes_under(root, SECRET.encode())  # positive controls: both still on disk
    assert bytes_under(root, vector_bytes(GONE_TEXT))

    reached, release = threading.Event(), threading.Event()
    held(getattr(ranker, channel), step, reached, release)
    outcome: list[bool] = []
    purge = threading.Thread(target=lambda: outcome.append(ranker.purge(SCOPE, ["mem_gone"])))
    purge.start()
    try:
        assert reached.wait(WAIT_S)
        meanwhile: list[set[str]] = []

        def change_and_search() -> None:
            ranker.apply(
                SCOPE,
                upserts=[doc(SCOPE, "mem_late", "harbour pilot boarding ladder rules")],
                removals=["mem_drop"],
                through_cursor=5,
            )
            meanwhile.append(ids(ranker, "harbour", LEXICAL_PROFILE))
            meanwhile.append(ids(ranker, "harbour", HYBRID_PROFILE))

        changer = threading.Thread(target=change_and_search)
        changer.start()
        changer.join(WAIT_S)
        assert not changer.is_alive(), "the apply or the search waited for the purge"
        assert meanwhile[0] == {"mem_keep", "mem_late"}
        assert {"mem_keep", "mem_late"} <= meanwhile[1] and "mem_drop" not in meanwhile[1]
    finally:
        release.set()
        purge.join(WAIT_S)
    assert outcome == [True]

    assert bytes_under(root, SECRET.encode()) == []
    assert bytes_under(root, b"mem_gone") == []
    assert bytes_under(root, vector_bytes(GONE_TEXT)) == []
    for reopened in (ranker, None):
        if reopened is None:
            ranker.close()
            reopened = Ranker(root, HashingTestEncoder())
        assert ids(reopened, "harbour", LEXICAL_PROFILE) == {"mem_keep", "mem_late"}
        hybrid = ids(reopened, "harbour pilot ladder", HYBRID_PROFILE)
        assert "mem_late" in hybrid and not hybrid & {"mem_drop", "mem_gone"}
        assert reopened.projection_cursor(SCOPE) == {"lexical": 5, "semantic": 5}
    reopened.close()
