"""Parity: one random sequence of calls (all six tools, replays, conflicting replays,
reused confirmation refs, withdraw and forget) against SQLite and against PostgreSQL
gives the same answers and the same store state.

Normalisation, stated: candidate ids are drawn from a seeded generator in both runs (so
record ids, which derive from them, and the ranking's tie-breaks by record id are the
same); event, key and snapshot ids, instants, and digests that cover them or a time
differ between any two runs, so each run maps every such value to a placeholder
numbered by first appearance. Numbering by first appearance is only sound when equal
values mean the same thing in both runs; a receipt stamped at millisecond resolution
breaks that when two distinct calls fall in one millisecond (two searches by one
principal then carry one authorization receipt digest in that run only, and the
numbering shifts from there on). So the sequence starts each call in a millisecond
after the previous call's: no two calls share an instant in either run. The
comparison therefore checks that the same values recur in the same places (an id
answered by capture is the one admission, get and forget then name; a replay repeats
the first answer's digests) and that everything else is byte-identical: statuses,
error codes, journal cursors, event kinds and bodies, record states, scores and ranks.
Payload digests depend on content only and are also compared unmapped.
"""

from __future__ import annotations

import hashlib
import json
import random
import re
import time
from pathlib import Path
from typing import Any

import pytest
from engine_support import (  # noqa: E402
    CAPTURE,
    FORGET,
    GET,
    PURPOSE,
    REQUEST_ADMISSION,
    SEARCH,
    WITHDRAW,
    ContractError,
    capture_args,
    confirmed,
    context,
    open_engine,
)

from engram.service.engine import capture as capture_module  # noqa: E402
from engram.service.engine.clock import now_ms  # noqa: E402

STATES = ("accepted_current", "accepted_disputed", "historical", "expired", "trust_invalid", "tombstoned")
TOKEN = re.compile(r"(?:cand|mem|evt|key|snap)_[a-z0-9]+|sha256:[0-9a-f]{64}|\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z")
WORDS = (
    "osprey",
    "billing",
    "ledger",
    "replica",
    "kestrel",
    "cursor",
    "tantivy",
    "vector",
    "region",
    "quota",
    "parser",
    "pelican",
    "harbor",
    "lantern",
    "meadow",
    "falcon",
)


class Normaliser:
    """Replaces run-specific values with placeholders numbered by first appearance."""

    def __init__(self) -> None:
        self.seen: dict[str, str] = {}

    def __call__(self, value: Any) -> Any:
        text = json.dumps(_without_cursors(value), sort_keys=True)
        return json.loads(TOKEN.sub(self._token, text))

    def _token(self, match: re.Match[str]) -> str:
        token = match.group(0)
        if token[0].isdigit():
            return "<instant>"  # two calls in one millisecond share an instant in one run only
        kind = token.split("_")[0] if "_" in token[:5] else "digest"
        return self.seen.setdefault(token, f"<{kind}#{len(self.seen)}>")


def _without_cursors(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: ("<page-cursor>" if k == "next_page_cursor" else _without_cursors(v)) for k, v in value.items()}
    if isinstance(value, list):
        return [_without_cursors(v) for v in value]
    return value


def _next_millisecond() -> None:
    """Return once the engine's clock has left the current millisecond, so the next call
    stamps nothing with an instant an earlier call already used."""
    start = now_ms()
    while now_ms() <= start:
        time.sleep(0.0001)


def _text(rng: random.Random, i: int) -> str:
    return f"note {i}: " + " ".join(rng.sample(WORDS, 5))


def run_sequence(engine: Any, seed: int, steps: int = 80) -> tuple[list[Any], list[str]]:
    """Play the seeded sequence; every answer (or error code) in order, and the ids met."""
    rng = random.Random(seed)
    engine.operator.set_tenant_enabled("acme", True)
    ctx = context()
    answers: list[Any] = []
    candidates: list[str] = []
    records: list[str] = []
    calls: list[tuple[str, dict[str, Any], Any]] = []  # replayable (tool, args, ctx)
    refs: list[str] = []
    cursor: str | None = None
    last_query = ""

    def call(tool: str, args: dict[str, Any], call_ctx: Any = ctx) -> Any:
        _next_millisecond()
        try:
            out = engine.execute(tool, call_ctx, args)
        except ContractError as exc:
            answers.append({"error": exc.code.value})
            return None
        answers.append(out)
        return out

    for i in range(steps):
        op = (
            ("capture", "admit")[i % 2]
            if i < 24
            else rng.choice(
                (
                    "capture",
                    "admit",
                    "search",
                    "search",
                    "page",
                    "page",
                    "get",
                    "replay",
                    "conflict",
                    "withdraw",
                    "forget",
                    "reuse_ref",
                )
            )
        )
        if op == "capture":
            args = capture_args(_text(rng, i), idempotency_key=f"idem-key-cap-{i:08d}")
            out = call(CAPTURE, args)
            calls.append((CAPTURE, args, ctx))
            if out and out.get("candidate_id"):
                candidates.append(out["candidate_id"])
        elif op == "admit" and candidates:
            args = {
                "candidate_id": candidates[-1] if i < 24 else rng.choice(candidates),
                "idempotency_key": f"idem-key-adm-{i:08d}",
            }
            out = call(REQUEST_ADMISSION, args)
            calls.append((REQUEST_ADMISSION, args, ctx))
            rid = (out or {}).get("outcome", {}).get("record_id")
            if rid and rid not in records:
                records.append(rid)
        elif op == "search":
            last_query = " ".join(rng.sample(WORDS, 2))
            out = call(SEARCH, {"query": last_query, "purpose_ref": PURPOSE, "limit": 2})
            cursor = (out or {}).get("next_page_cursor")
        elif op == "page" and cursor is not None:
            # the same query and parameters as the search that issued the cursor
            out = call(SEARCH, {"query": last_query, "purpose_ref": PURPOSE, "limit": 2, "page_cursor": cursor})
            cursor = (out or {}).get("next_page_cursor")
        elif op == "get":
            target = rng.choice(records + ["mem_" + "a" * 52]) if records else "mem_" + "a" * 52
            call(GET, {"record_id": target, "purpose_ref": PURPOSE})
        elif op == "replay" and calls:
            tool, args, call_ctx = rng.choice(calls)
            call(tool, args, call_ctx)
        elif op == "conflict" and calls:
            tool, args, call_ctx = rng.choice(calls)
            changed = json.loads(json.dumps(args))
            if tool == CAPTURE:
                changed["payload"]["components"][0]["text"] += " changed"
            elif tool == REQUEST_ADMISSION and candidates:
                changed["candidate_id"] = rng.choice(candidates)
            else:
                changed["reason_ref"] = "reason:changed"
            call(tool, changed, call_ctx)
        elif op == "withdraw" and candidates:
            cid = rng.choice(candidates)
            args = {"candidate_id": cid, "idempotency_key": f"idem-key-wdr-{i:08d}", "reason_ref": "reason:x"}
            refs.append(f"ref-{i}")
            gated = confirmed(ctx, WITHDRAW, cid, args, ref=refs[-1])
            call(WITHDRAW, args, gated)
            calls.append((WITHDRAW, args, gated))
        elif op == "forget" and records:
            rid = rng.choice(records)
            args = {"record_id": rid, "idempotency_key": f"idem-key-fgt-{i:08d}", "reason_ref": "reason:x"}
            refs.append(f"ref-{i}")
            gated = confirmed(ctx, FORGET, rid, args, ref=refs[-1])
            call(FORGET, args, gated)
            calls.append((FORGET, args, gated))
        elif op == "reuse_ref" and refs and records:
            rid = rng.choice(records)
            args = {"record_id": rid, "idempotency_key": f"idem-key-reu-{i:08d}", "reason_ref": "reason:x"}
            call(FORGET, args, confirmed(ctx, FORGET, rid, args, ref=rng.choice(refs)))
    return answers, candidates


def store_state(engine: Any, candidate_ids: list[str]) -> dict[str, Any]:
    """Everything the store holds about the run, read through the Store protocol."""
    store = engine.deps.store
    state: dict[str, Any] = {
        "tenants": {"acme": store.tenant_enabled("acme")},
        "pending_purges": {"/".join(k): sorted(v) for k, v in store.pending_purges().items()},
    }
    for scope in store.scopes():
        with store.reader() as tx:
            candidates = [tx.candidate(scope, cid) for cid in dict.fromkeys(candidate_ids)]
        state["/".join(scope)] = {
            "cursor": store.scope_cursor(scope),
            "chain_intact": store.verify_chain(scope),
            "events": [
                [e.cursor, e.event_id, e.kind, e.subject, e.body, e.event_digest, e.recorded_at]
                for e in store.events(scope)
            ],
            "records": {
                st: [
                    [
                        r.record_id,
                        r.record_digest,
                        r.payload_digest,
                        r.key_id is None,
                        r.sealed is None,
                        r.valid_from_ms,
                        r.valid_to_ms,
                        r.expires_at_ms,
                        r.accepted_cursor,
                        r.accepted_at,
                        r.candidate_id,
                    ]
                    for r in sorted(store.records_in_state(st, scope), key=lambda r: r.accepted_cursor)
                ]
                for st in STATES
            },
            "live_more_than": [store.live_more_than(scope, n) for n in range(4)],
            "candidates": [
                [
                    c.candidate_id,
                    c.state,
                    c.key_id is None,
                    c.sealed is None,
                    c.record_digest,
                    c.payload_digest,
                    c.principal,
                    c.created_cursor,
                ]
                for c in candidates
                if c
            ],
        }
    return state


def _differences(a: Any, b: Any, path: str = "") -> list[str]:
    if isinstance(a, dict) and isinstance(b, dict):
        return [d for k in sorted(set(a) | set(b)) for d in _differences(a.get(k), b.get(k), f"{path}.{k}")]
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [d for i, (x, y) in enumerate(zip(a, b)) for d in _differences(x, y, f"{path}[{i}]")]
    return [] if a == b else [f"{path}: {a!r} != {b!r}"]


def _digest(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()


class SeededIds:
    """Stands in for the `secrets` module where capture mints candidate ids."""

    def __init__(self, seed: int) -> None:
        self._rng = random.Random(seed)

    def token_bytes(self, n: int) -> bytes:
        return self._rng.randbytes(n)


def _play(engine: Any, seed: int, monkeypatch: pytest.MonkeyPatch) -> tuple[Any, Any, list[str]]:
    monkeypatch.setattr(capture_module, "secrets", SeededIds(seed))
    normalise = Normaliser()
    answers, candidates = run_sequence(engine, seed)
    state = store_state(engine, candidates)
    payloads = sorted(
        r[2]
        for scope in state.values()
        if isinstance(scope, dict) and "records" in scope
        for rows in scope["records"].values()
        for r in rows
    )
    return normalise(answers), normalise(state), payloads


@pytest.mark.parametrize("seed", [7, 1234])
def test_sqlite_and_postgres_agree(
    tmp_path: Path, database_url: str, seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    sqlite_engine = open_engine(tmp_path / "sqlite")
    pg_engine = open_engine(tmp_path / "pg", database_url=database_url)
    try:
        a_answers, a_state, a_payloads = _play(sqlite_engine, seed, monkeypatch)
        b_answers, b_state, b_payloads = _play(pg_engine, seed, monkeypatch)
    finally:
        sqlite_engine.close()
        pg_engine.close()
    # the sequence exercised something: successes, errors and more than one tool
    assert len(a_answers) > 40 and any("error" in a for a in a_answers)
    assert any("outcome" in a for a in a_answers) and any("records" in a for a in a_answers)
    for i, (a, b) in enumerate(zip(a_answers, b_answers, strict=True)):
        assert a == b, f"answer {i} differs: {_differences(a, b)}"
    assert a_state == b_state
    assert _digest(a_state) == _digest(b_state)
    assert a_payloads and a_payloads == b_payloads
