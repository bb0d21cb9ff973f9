"""Unit tests of the confirmation gate (service/engine/gates.py)."""

from __future__ import annotations

import dataclasses
import hashlib
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engram.models.codes import ContractError, ErrorCode
from engram.models.digests import DigestKind, digest
from engram.models.tools import CAPTURE, FORGET, GET, REQUEST_ADMISSION, SEARCH, TOOLS, WITHDRAW
from engram.service.engine.context import CallContext, Confirmation
from engram.service.engine.gates import (
    MAX_TTL_MS,
    USE_WITHIN_MS,
    check_confirmation,
    operation_digest,
)

NOW = 1_700_000_000_000
ARGS = {"record_id": "mem_abc", "idempotency_key": "forget-0123456789ab", "reason_ref": "reason:x"}


def ctx(confirmation: Confirmation | None = None, confirm: frozenset[str] = frozenset()) -> CallContext:
    return CallContext(
        tenant="t",
        workspace="w",
        principal="p",
        agent_id="a",
        session="s",
        purpose="pu",
        tools=frozenset({FORGET}),
        confirm=confirm,
        confirmation=confirmation,
    )


def conf(**overrides) -> Confirmation:
    base = dict(
        ref="conf-1",
        capability=FORGET,
        target="mem_abc",
        operation_digest=operation_digest(FORGET, ARGS),
        approved_at_ms=NOW - 1_000,
        expires_at_ms=NOW + 60_000,
    )
    base.update(overrides)
    return Confirmation(**base)


class Ledger:
    def __init__(self) -> None:
        self.used: set[str] = set()

    def __call__(self, ref: str) -> bool:
        if ref in self.used:
            return False
        self.used.add(ref)
        return True


def check(c: Confirmation | None, *, tool=FORGET, target="mem_abc", args=ARGS, now=NOW, ledger=None):
    check_confirmation(ctx(c), tool, target, args, now, ledger or Ledger())


def test_operation_digest_formula():
    # Recomputed from the documented formula by hand (ASCII-only arguments, so JCS is
    # sorted keys, no whitespace), not through the function under test.
    jcs = json.dumps({"arguments": ARGS, "tool": FORGET}, sort_keys=True, separators=(",", ":"))
    expected = "sha256:" + hashlib.sha256(b"engram/operation/v1\0" + jcs.encode()).hexdigest()
    assert operation_digest(FORGET, ARGS) == expected
    assert digest(DigestKind.OPERATION, {"tool": FORGET, "arguments": ARGS}) == expected
    assert operation_digest(FORGET, ARGS).startswith("sha256:")
    # Key order does not matter (JCS); any value change does.
    assert operation_digest(FORGET, dict(reversed(list(ARGS.items())))) == operation_digest(FORGET, ARGS)
    assert operation_digest(FORGET, {**ARGS, "reason_ref": "other"}) != operation_digest(FORGET, ARGS)
    assert operation_digest(WITHDRAW, ARGS) != operation_digest(FORGET, ARGS)
    # NFC: a decomposed string digests like its composed form.
    assert operation_digest(FORGET, {"r": "e\u0301"}) == operation_digest(FORGET, {"r": "\u00e9"})


def test_valid_confirmation_passes_and_is_claimed_once():
    ledger = Ledger()
    check(conf(), ledger=ledger)
    assert ledger.used == {"conf-1"}
    with pytest.raises(ContractError) as info:
        check(conf(), ledger=ledger)
    assert info.value.code is ErrorCode.GATE_FAILED


@pytest.mark.parametrize(
    "variant",
    [
        "missing",
        "wrong capability",
        "wrong target",
        "wrong digest",
        "args changed",
        "expired",
        "too late",
        "ttl too long",
        "expires before approval",
        "approved in the future",
        "empty ref",
        "reused",
    ],
)
def test_gate_failed_variants(variant):
    ledger = Ledger()
    kwargs: dict = {}
    c: Confirmation | None = conf()
    if variant == "missing":
        c = None
    elif variant == "wrong capability":
        c = conf(capability=WITHDRAW)
    elif variant == "wrong target":
        c = conf(target="mem_other")
    elif variant == "wrong digest":
        c = conf(operation_digest="sha256:" + "0" * 64)
    elif variant == "args changed":
        kwargs["args"] = {**ARGS, "reason_ref": "reason:y"}
    elif variant == "expired":
        c = conf(approved_at_ms=NOW - 20_000, expires_at_ms=NOW - 1)
    elif variant == "too late":
        c = conf(approved_at_ms=NOW - USE_WITHIN_MS - 1, expires_at_ms=NOW + 60_000)
    elif variant == "ttl too long":
        c = conf(approved_at_ms=NOW - 1_000, expires_at_ms=NOW - 1_000 + MAX_TTL_MS + 1)
    elif variant == "expires before approval":
        c = conf(approved_at_ms=NOW, expires_at_ms=NOW - 1)
    elif variant == "approved in the future":
        c = conf(approved_at_ms=NOW + 10_000, expires_at_ms=NOW + 20_000)
    elif variant == "empty ref":
        c = conf(ref="")
    elif variant == "reused":
        ledger.used.add("conf-1")
    with pytest.raises(ContractError) as info:
        check(c, ledger=ledger, **kwargs)
    assert info.value.code is ErrorCode.GATE_FAILED
    if variant != "reused":
        assert ledger.used == set()  # a rejected attempt never burns the ref


def test_boundaries_are_inclusive():
    for i, c in enumerate(
        (
            conf(ref="edge-use-within", approved_at_ms=NOW - USE_WITHIN_MS, expires_at_ms=NOW),
            conf(ref="edge-max-ttl", approved_at_ms=NOW - 1_000, expires_at_ms=NOW - 1_000 + MAX_TTL_MS),
        )
    ):
        ledger = Ledger()
        check(c, ledger=ledger)
        assert ledger.used == {c.ref}, i  # passed every check and was claimed
    # one millisecond past either edge is refused
    for c in (
        conf(approved_at_ms=NOW - USE_WITHIN_MS - 1, expires_at_ms=NOW),
        conf(approved_at_ms=NOW - 1_000, expires_at_ms=NOW - 1_000 + MAX_TTL_MS + 1),
    ):
        with pytest.raises(ContractError):
            check(c)


def test_unencodable_arguments_fail_the_gate():
    with pytest.raises(ContractError):
        check(conf(), args={**ARGS, "x": float("nan")})


def needs_confirmation(tool: str, confirm: frozenset[str] = frozenset()) -> bool:
    return TOOLS[tool].needs_confirmation(confirm)


def test_needs_confirmation():
    assert needs_confirmation(FORGET) and needs_confirmation(WITHDRAW)
    for tool in (CAPTURE, REQUEST_ADMISSION, SEARCH, GET):
        assert not needs_confirmation(tool)
    both = frozenset({CAPTURE, REQUEST_ADMISSION})
    assert needs_confirmation(CAPTURE, both) and needs_confirmation(REQUEST_ADMISSION, both)
    assert not needs_confirmation(SEARCH, frozenset({SEARCH}))


def test_confirmation_target():
    assert TOOLS[FORGET].confirmation_target(ARGS) == "mem_abc"
    assert TOOLS[WITHDRAW].confirmation_target({"candidate_id": "c1"}) == "c1"
    assert TOOLS[REQUEST_ADMISSION].confirmation_target({"candidate_id": "c2"}) == "c2"
    assert TOOLS[CAPTURE].confirmation_target({"idempotency_key": "k" * 16}) == "k" * 16
    assert TOOLS[SEARCH].confirmation_target({"query": "q"}) is None
    assert TOOLS[FORGET].confirmation_target({"record_id": 5}) is None


@settings(max_examples=200, deadline=None)
@given(
    approved=st.integers(NOW - 400_000, NOW + 400_000),
    ttl=st.integers(-10, 400_000),
)
def test_time_window_property(approved, ttl):
    c = conf(approved_at_ms=approved, expires_at_ms=approved + ttl)
    valid = 0 <= ttl <= MAX_TTL_MS and approved - 5_000 <= NOW <= min(approved + USE_WITHIN_MS, approved + ttl)
    try:
        check(c)
    except ContractError:
        assert not valid
    else:
        assert valid


def test_confirmation_is_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        conf().ref = "x"  # type: ignore[misc]
