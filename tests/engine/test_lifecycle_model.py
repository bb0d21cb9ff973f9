"""A model-based test of the lifecycle: random capture / admission / withdraw / forget /
get sequences against a small reference model of candidate and record states."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from engine_support import (
    CAPTURE,
    ContractError,
    ErrorCode,
    admit,
    capture_args,
    context,
    forget,
    get,
    open_engine,
    search_ids,
    withdraw,
)
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import Bundle, RuleBasedStateMachine, invariant, rule

TEXTS = ["The auk ledger compacts nightly.", "The auk ledger shards by tenant.", "The auk cache is warm."]
CTX = context(workspace="model")
TERMINAL = {"accepted", "rejected", "withdrawn"}


def outcome_code(fn, *args):
    try:
        return fn(*args)
    except ContractError as exc:
        return exc.code


class Lifecycle(RuleBasedStateMachine):
    candidates = Bundle("candidates")
    records = Bundle("records")

    def __init__(self) -> None:
        super().__init__()
        root = "/dev/shm" if os.path.isdir("/dev/shm") and os.environ.get("ENGRAM_TEST_ON_DISK") != "1" else None
        self.dir = Path(tempfile.mkdtemp(prefix="engram-model-", dir=root))
        self.engine = open_engine(self.dir, load_model=False)  # lexical only: exact result sets
        self.cand_state: dict[str, str] = {}
        self.cand_text: dict[str, int] = {}
        self.rec_state: dict[str, str] = {}
        self.rec_text: dict[str, int] = {}

    def teardown(self) -> None:
        self.engine.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    def live_for(self, text: int) -> str | None:
        return next(
            (r for r, s in self.rec_state.items() if s == "accepted_current" and self.rec_text[r] == text), None
        )

    def tombstoned(self, text: int) -> bool:
        return any(s == "tombstoned" and self.rec_text[r] == text for r, s in self.rec_state.items())

    @rule(target=candidates, text=st.integers(0, len(TEXTS) - 1))
    def capture(self, text: int) -> str:
        out = self.engine.execute(CAPTURE, CTX, capture_args(TEXTS[text]))
        assert out["status"] == "committed_pending"
        self.cand_state[out["candidate_id"]] = "pending"
        self.cand_text[out["candidate_id"]] = text
        return out["candidate_id"]

    @rule(target=records, cid=candidates)
    def admit(self, cid: str):
        state, text = self.cand_state[cid], self.cand_text[cid]
        got = outcome_code(admit, self.engine, CTX, cid)
        if state in TERMINAL:
            assert got is ErrorCode.ALREADY_TERMINAL
            return "mem_" + "a" * 52
        if state == "pending_adjudication":
            assert got is ErrorCode.ILLEGAL_TRANSITION
            return "mem_" + "a" * 52
        outcome = got["outcome"]
        if self.tombstoned(text):
            assert outcome["status"] == "pending_adjudication"
            self.cand_state[cid] = "pending_adjudication"
            return "mem_" + "a" * 52
        existing = self.live_for(text)
        if existing is not None:
            assert outcome["status"] == "duplicate_exact" and outcome["record_id"] == existing
            self.cand_state[cid] = "accepted"
            return existing
        assert outcome["status"] == "accepted"
        self.cand_state[cid] = "accepted"
        rid = outcome["record_id"]
        self.rec_state[rid] = "accepted_current"
        self.rec_text[rid] = text
        return rid

    @rule(cid=candidates)
    def withdraw(self, cid: str) -> None:
        state = self.cand_state[cid]
        got = outcome_code(withdraw, self.engine, CTX, cid)
        if state in TERMINAL:
            assert got is ErrorCode.ALREADY_TERMINAL
        elif state == "pending_adjudication":
            assert got is ErrorCode.ILLEGAL_TRANSITION
        else:
            assert got["receipt"]["to_state"] == "withdrawn"
            self.cand_state[cid] = "withdrawn"

    @rule(rid=records)
    def forget(self, rid: str) -> None:
        state = self.rec_state.get(rid)
        got = outcome_code(forget, self.engine, CTX, rid)
        if state is None:
            assert got is ErrorCode.NOT_FOUND
        elif state == "tombstoned":
            assert got is ErrorCode.ALREADY_TERMINAL
        else:
            assert got["receipt"]["from_state"] == state and got["projection_invalidation"] == "complete"
            self.rec_state[rid] = "tombstoned"

    @rule(rid=records)
    def get(self, rid: str) -> None:
        got = outcome_code(get, self.engine, CTX, rid)
        if self.rec_state.get(rid) == "accepted_current":
            assert got["record"]["record_id"] == rid
            assert got["record"]["components"][0]["text"] == TEXTS[self.rec_text[rid]]
        else:
            assert got is ErrorCode.NOT_FOUND

    @invariant()
    def search_shows_exactly_the_live_records(self) -> None:
        live = {r for r, s in self.rec_state.items() if s == "accepted_current"}
        assert set(search_ids(self.engine, CTX, "auk", limit=50)) == live

    @invariant()
    def store_agrees(self) -> None:
        with self.engine.deps.store.reader() as tx:
            for cid, state in self.cand_state.items():
                assert tx.candidate(CTX.scope, cid).state == state
            for rid, state in self.rec_state.items():
                assert tx.record(CTX.scope, rid).state == state


Lifecycle.TestCase.settings = settings(max_examples=20, stateful_step_count=12, deadline=None)
TestLifecycle = Lifecycle.TestCase
