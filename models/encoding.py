"""The contract's common encodings as reusable annotated types.

Bounds are counted in UTF-8 bytes (the published JSON Schema can only say characters,
so it carries the looser character bound and the runtime check here is the stricter
one); every string must already be in Unicode NFC, because digests normalise to NFC
and a non-NFC string would otherwise digest as a different text than the one stored.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Annotated, Any

import annotated_types
from pydantic import AfterValidator, Field
from pydantic_core import PydanticCustomError

from .digests import MAX_SAFE_INTEGER

DIGEST_PATTERN = r"^sha256:[0-9a-f]{64}$"
INSTANT_PATTERN = r"^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{3}Z$"
RECORD_ID_PATTERN = r"^mem_[a-z2-7]+$"
CURSOR_PATTERN = r"^(0|[1-9][0-9]*)$"

_DIGEST_RE = re.compile(DIGEST_PATTERN)
_INSTANT_RE = re.compile(INSTANT_PATTERN)


def _utf8_length(value: str) -> int:
    try:
        return len(value.encode("utf-8"))
    except UnicodeEncodeError as exc:  # lone surrogate from a JSON \ud800 escape
        raise PydanticCustomError("not_utf8", "string is not valid UTF-8") from exc


def _bounded_nfc(min_bytes: int, max_bytes: int) -> AfterValidator:
    def check(value: str) -> str:
        size = _utf8_length(value)
        if not min_bytes <= size <= max_bytes:
            raise PydanticCustomError(
                "byte_bounds",
                "string length out of bounds ({min_bytes} to {max_bytes} UTF-8 bytes)",
                {"min_bytes": min_bytes, "max_bytes": max_bytes},
            )
        if not unicodedata.is_normalized("NFC", value):
            raise PydanticCustomError("not_nfc", "string is not NFC")
        return value

    return AfterValidator(check)


@dataclass(frozen=True)
class Utf8Text(annotated_types.GroupedMetadata):
    """`Annotated[str, Utf8Text(min, max)]`: a string of `min`..`max` UTF-8 bytes in NFC.

    Pydantic expands it into the character bounds the JSON Schema publishes (4 bytes per
    character at most) and the exact byte and NFC check.
    """

    min_bytes: int
    max_bytes: int

    def __iter__(self) -> Iterator[Any]:
        yield Field(min_length=-(-self.min_bytes // 4), max_length=self.max_bytes)
        yield _bounded_nfc(self.min_bytes, self.max_bytes)


def _check_digest(value: str) -> str:
    if not _DIGEST_RE.fullmatch(value):
        raise PydanticCustomError("invalid_digest", "digest must be sha256:<64 lowercase hex>")
    return value


def _check_instant(value: str) -> str:
    if not _INSTANT_RE.fullmatch(value):
        raise PydanticCustomError("invalid_instant", "instant must be YYYY-MM-DDTHH:mm:ss.sssZ")
    try:
        datetime.strptime(value, "%Y-%m-%dT%H:%M:%S.%fZ")
    except ValueError as exc:
        raise PydanticCustomError("invalid_instant", "instant is not a real UTC time") from exc
    return value


OpaqueRef = Annotated[str, Utf8Text(1, 512)]
IdempotencyKey = Annotated[
    str,
    Utf8Text(16, 256),
    Field(description="16 to 256 UTF-8 bytes (NFC): one key per intended effect; a retry reuses it."),
]
Digest = Annotated[str, Field(json_schema_extra={"pattern": DIGEST_PATTERN}), AfterValidator(_check_digest)]
Instant = Annotated[str, Field(json_schema_extra={"pattern": INSTANT_PATTERN}), AfterValidator(_check_instant)]
RecordId = Annotated[str, Field(pattern=RECORD_ID_PATTERN)]
SafeInt = Annotated[int, Field(ge=-MAX_SAFE_INTEGER, le=MAX_SAFE_INTEGER)]
Cursor = Annotated[str, Field(pattern=CURSOR_PATTERN)]
