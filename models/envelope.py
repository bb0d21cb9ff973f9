"""The result envelope every tool call answers with, success or failure."""

from __future__ import annotations

from typing import Any, Generic, Literal, TypeVar

from pydantic import BaseModel, ConfigDict

from . import compact_json
from .codes import MESSAGES, RETRIABLE, ErrorCode

SCHEMA_VERSION = 1
REDACTION_CLASS = "high"

Value = TypeVar("Value", bound=BaseModel)


class _Closed(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Output(_Closed, Generic[Value]):
    schema_version: Literal[1]
    value: Value


class SuccessEnvelope(_Closed, Generic[Value]):
    ok: Literal[True]
    output: Output[Value]
    auditId: str  # noqa: N815 - the contract's spelling
    redactionClass: Literal["high"]  # noqa: N815


class ErrorBody(_Closed):
    code: ErrorCode
    message: str
    retriable: bool


class FailureEnvelope(_Closed):
    ok: Literal[False]
    auditId: str  # noqa: N815
    redactionClass: Literal["high"]  # noqa: N815
    error: ErrorBody


def success_envelope(value: dict[str, Any], audit_id: str) -> dict[str, Any]:
    return {
        "ok": True,
        "output": {"schema_version": SCHEMA_VERSION, "value": value},
        "auditId": audit_id,
        "redactionClass": REDACTION_CLASS,
    }


def failure_envelope(code: ErrorCode, audit_id: str) -> dict[str, Any]:
    return {
        "ok": False,
        "auditId": audit_id,
        "redactionClass": REDACTION_CLASS,
        "error": {"code": code.value, "message": MESSAGES[code], "retriable": code in RETRIABLE},
    }


AUDIT_ID_PREFIX = "aud_"
AUDIT_ID_LENGTH = len(AUDIT_ID_PREFIX) + 32  # aud_ + 32 lowercase hex


def envelope_text(envelope: dict[str, Any]) -> str:
    """The one JSON text of an envelope: compact, UTF-8, as sent in the text content."""
    return compact_json.dumps(envelope).decode("utf-8")


def success_size(value: dict[str, Any]) -> int:
    """UTF-8 bytes of the success envelope that will carry `value`: what
    `max_packet_bytes` budgets (the auditId has a fixed length, so it can be counted now)."""
    placeholder = AUDIT_ID_PREFIX + "0" * (AUDIT_ID_LENGTH - len(AUDIT_ID_PREFIX))
    return len(envelope_text(success_envelope(value, placeholder)).encode("utf-8"))
