"""Contract digests: sha256 over RFC 8785 (JCS) bytes with one domain prefix per kind.

The prefix keeps a digest of one kind from ever being mistaken for another (a payload
digest cannot pass as an event digest), and JCS makes the bytes independent of key
order and number formatting, so a host in another language can recompute them.
"""

from __future__ import annotations

import base64
import hashlib
import math
import unicodedata
from enum import StrEnum
from typing import Any

import orjson
import rfc8785

from .errors import CanonicalizationRefused  # noqa: F401 - raised and caught here

MAX_SAFE_INTEGER = 2**53 - 1


class DigestKind(StrEnum):
    PAYLOAD = "payload"
    EVIDENCE = "evidence"
    RECORD = "record"
    EVENT = "event"
    INTENT = "intent"
    OPERATION = "operation"
    TRANSACTION_RECEIPT = "transaction-receipt"
    DECISION_RECEIPT = "decision-receipt"
    AUTHORIZATION_RECEIPT = "authorization-receipt"
    READ_RECEIPT = "read-receipt"
    REVALIDATION_RECEIPT = "revalidation-receipt"
    REDACTION_RECEIPT = "redaction-receipt"
    RANK_RECEIPT = "rank-receipt"
    PROJECTION_RECEIPT = "projection-receipt"
    COVERAGE_RECEIPT = "coverage-receipt"
    REQUEST = "request"
    IDS = "ids"
    SNAPSHOT = "snapshot"
    PACKET = "packet"
    RESPONSE = "response"
    QUERY = "query"
    IDEMPOTENCY_KEY = "idempotency-key"
    CONFIRMATION_REF = "confirmation-ref"
    POLICY = "policy"
    SHRED = "shred"


def _normalised(value: Any) -> Any:
    if isinstance(value, str):
        if not _encodable(value):
            raise CanonicalizationRefused("unpaired surrogate")
        return unicodedata.normalize("NFC", value)
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int):
        if abs(value) > MAX_SAFE_INTEGER:
            raise CanonicalizationRefused("unsafe integer")
        return value
    if isinstance(value, float):
        if not math.isfinite(value) or (value == 0.0 and math.copysign(1.0, value) < 0):
            raise CanonicalizationRefused("non-finite or negative zero")
        return value
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise CanonicalizationRefused("non-string key")
            norm_key = _normalised(key)
            if norm_key in out:
                raise CanonicalizationRefused("duplicate key after normalisation")
            out[norm_key] = _normalised(item)
        return out
    if isinstance(value, (list, tuple)):
        return [_normalised(item) for item in value]
    raise CanonicalizationRefused(f"unsupported type {type(value).__name__}")


class _NeedsFullCanonicaliser(Exception):
    """The value holds something orjson would not write as JCS does."""


_FIXED_FLOATS = (1e-4, 1e16)  # where Python's repr and ECMAScript both write plain decimals


def _dumps_form(value: Any) -> Any:
    """`value` in a form whose key-sorted orjson bytes are exactly its JCS bytes; raises
    _NeedsFullCanonicaliser when there is no such form.

    Why: the pure-Python canonicaliser costs about a millisecond a search (rank receipts
    and response digests cover hundreds of ids and scores), and orjson writes several times
    faster than the standard library's json (docs/results/). The two writers agree on:
    NFC strings (both write them raw and escape the same control characters), ASCII keys
    (UTF-16 and code-point order agree there), safe integers, booleans, null, and floats
    whose shortest round-trip digits both write in plain decimal notation; an integral
    float becomes the int JCS writes for it, and any other finite non-zero float (such as
    a similarity rounded to -5e-06, which JCS writes ``-0.000005``) goes in as JCS's own
    bytes for that number (an ``orjson.Fragment``). Anything else takes the full path.

    A container comes back as itself unless something inside it had to change (an
    integral float), so a value that is already in form is checked, not copied.
    """
    kind = type(value)
    if kind is str or isinstance(value, str):  # a StrEnum member too: both write its value
        if value.isascii() or (unicodedata.is_normalized("NFC", value) and _encodable(value)):
            return value
        raise _NeedsFullCanonicaliser
    if kind is dict:
        return _formed_members(value, value.items(), dict, keyed=True)
    if kind is list or kind is tuple:
        return _formed_members(value, enumerate(value), list, keyed=False)
    if kind is int:
        if abs(value) > MAX_SAFE_INTEGER:
            raise _NeedsFullCanonicaliser
        return value
    if kind is float:
        if value.is_integer() and abs(value) <= MAX_SAFE_INTEGER and math.copysign(1.0, value) > 0:
            return int(value)
        if _FIXED_FLOATS[0] <= abs(value) < _FIXED_FLOATS[1] and not value.is_integer():
            return value
        if math.isfinite(value) and value != 0.0:  # -0.0 and the non-finite: refused on the full path
            return orjson.Fragment(rfc8785.dumps(value))
        raise _NeedsFullCanonicaliser
    if value is None or kind is bool:
        return value
    raise _NeedsFullCanonicaliser


def _formed_members(container: Any, members: Any, copy: Any, *, keyed: bool) -> Any:
    """``container`` with each (key or index, item) of ``members`` in form: the container
    itself when no item changed, else a ``copy`` of it with the changed items replaced.
    ``keyed``: the slots are an object's keys, which must be ASCII strings."""
    changed = None
    for slot, item in members:
        if keyed and not (isinstance(slot, str) and slot.isascii()):
            raise _NeedsFullCanonicaliser
        # The common leaves already in form, without a call per item (what _dumps_form
        # returns unchanged): ids and plain text, safe ints, plain decimal floats, null.
        kind = type(item)
        if kind is str:
            if item.isascii():
                continue
        elif kind is float:
            if _FIXED_FLOATS[0] <= abs(item) < _FIXED_FLOATS[1] and not item.is_integer():
                continue
        elif kind is int:
            if -MAX_SAFE_INTEGER <= item <= MAX_SAFE_INTEGER:
                continue
        elif item is None:
            continue
        formed = _dumps_form(item)
        if formed is not item:
            if changed is None:
                changed = copy(container)
            changed[slot] = formed
    return container if changed is None else changed


def _encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def canonical_bytes(value: Any) -> bytes:
    """JCS bytes of `value` with every string NFC-normalised first."""
    try:
        form = _dumps_form(value)
    except _NeedsFullCanonicaliser:
        pass
    else:
        # Keys are ASCII strings here (checked), a StrEnum member among them: orjson
        # writes such a key only with OPT_NON_STR_KEYS, as its value.
        return orjson.dumps(form, option=orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS)
    try:
        return rfc8785.dumps(_normalised(value))
    except rfc8785.CanonicalizationError as exc:
        raise CanonicalizationRefused(str(exc)) from exc


def digest_bytes(kind: DigestKind, value: Any) -> bytes:
    prefix = f"engram/{kind.value}/v1\0".encode()
    return hashlib.sha256(prefix + canonical_bytes(value)).digest()


def digest(kind: DigestKind, value: Any) -> str:
    """`sha256:<hex>` of the domain-prefixed JCS bytes of `value`."""
    return "sha256:" + digest_bytes(kind, value).hex()


def receipt_digest(kind: DigestKind, receipt: dict[str, Any]) -> str:
    """A receipt digests itself without its own `receipt_digest` field."""
    return digest(kind, {k: v for k, v in receipt.items() if k != "receipt_digest"})


def seal_receipt(kind: DigestKind, receipt: dict[str, Any]) -> dict[str, Any]:
    """Return `receipt` with its `receipt_digest` filled in."""
    return {**receipt, "receipt_digest": receipt_digest(kind, receipt)}


def record_id_for(record_digest: str) -> str:
    """`mem_` + lowercase unpadded base32 of the record digest's 32 bytes."""
    raw = bytes.fromhex(record_digest.removeprefix("sha256:"))
    return "mem_" + base64.b32encode(raw).decode("ascii").rstrip("=").lower()
