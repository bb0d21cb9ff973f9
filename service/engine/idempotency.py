"""One reservation per (scope, principal, idempotency key), bound to an intent hash.

The intent hash covers the tool, the target and the content of the call (everything
but the key itself), so the same key with other content, another target or another
tool is DIGEST_CONFLICT. The reservation and the first result are written in the same
transaction as the effect: a crash leaves either both or neither, so a retry can never
duplicate an effect or lose one. The key itself is kept only as a digest
(`key_digest`): an agent may put anything in it, and the store is not the place for it.

Work that follows the commit (projecting an admitted record, purging a forgotten one)
runs under :func:`after_commit`: a store that fails there fails a call whose effect is
already durable, and the caller must learn to retry with its key, not that nothing
happened.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from engram.models import compact_json
from engram.models.codes import ContractError, ErrorCode
from engram.models.digests import DigestKind, digest
from engram.models.scope import Scope
from engram.models.tools import CAPTURE
from engram.service.store.base import CommitUncertain, StoreUnavailable, Transaction


def key_digest(key: str) -> str:
    """What the store keeps in place of an idempotency key."""
    return digest(DigestKind.IDEMPOTENCY_KEY, key)


def intent_hash(tool: str, arguments: dict[str, Any]) -> str:
    content = {k: v for k, v in arguments.items() if k != "idempotency_key"}
    return digest(DigestKind.INTENT, {"tool": tool, "content": content})


def replayed(tool: str, first: dict[str, Any]) -> dict[str, Any]:
    """The first result, marked as a replay the way the contract spells it per tool."""
    if tool == CAPTURE:
        return {**first, "status": "duplicate_exact"}
    return {**first, "replayed": True}


def find_replay(
    tx: Transaction, scope: Scope, principal: str, key: str, tool: str, intent: str
) -> dict[str, Any] | None:
    """The replayed result when this key already committed the same intent; None when
    the key is new; DIGEST_CONFLICT when it committed something else."""
    found = tx.reservation(scope, principal, key_digest(key))
    if found is None:
        return None
    first_tool, first_intent, response = found
    if first_tool != tool or first_intent != intent:
        raise ContractError(ErrorCode.DIGEST_CONFLICT)
    return replayed(tool, json.loads(response))


def encode_result(result: dict[str, Any]) -> str:
    # Key order is kept (not sorted): a replay must serialise to the same bytes as the
    # first answer, and JSON objects decode in the order they were written.
    return compact_json.dumps(result).decode("utf-8")


def reserve(
    tx: Transaction,
    scope: Scope,
    principal: str,
    key: str,
    tool: str,
    intent: str,
    result: dict[str, Any],
) -> None:
    """Bind `key` (as its digest) to this intent and its first result, in `tx`."""
    tx.reserve(scope, principal, key_digest(key), tool, intent, encode_result(result))


def rewrite(tx: Transaction, scope: Scope, principal: str, key: str, result: dict[str, Any]) -> None:
    """Replace the first result a reservation replays (a physical outcome now known)."""
    tx.update_reservation(scope, principal, key_digest(key), encode_result(result))


@contextmanager
def after_commit() -> Iterator[None]:
    """A mutation's work after its commit: the store failing there is
    MUTATION_OUTCOME_UNKNOWN (CommitUncertain: the retry replays the committed
    effect), never STORE_UNAVAILABLE, which would say nothing happened."""
    try:
        yield
    except StoreUnavailable as exc:
        raise CommitUncertain() from exc
