"""The six tools, each with its whole policy: what every room needs to know about a tool.

A tool's spec says whether it changes memory, whether it destroys, when it needs a
human confirmation and which argument that confirmation is bound to, where its
`purpose_ref` lives, and how a human is asked. The engine registers an operation per
spec, and the front end, the gates and the elicitation read the spec: no room names a
tool to decide how to treat it.

`tools/list` publishes `input_schema` and `output_schema` from here. Both are generated
from the pydantic models, made self-contained (definitions inlined, no `$ref`) and then
strictly closed: every object gets `additionalProperties: false`, and no `default: null`
survives (optional means omitted).
"""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from enum import Enum
from functools import cached_property
from typing import Any

from pydantic import BaseModel, ValidationError

from .codes import ContractError, ErrorCode
from .envelope import FailureEnvelope, SuccessEnvelope
from .inputs import (
    MAX_ARGUMENT_BYTES,
    AdmissionInput,
    CaptureInput,
    ForgetInput,
    GetInput,
    SearchInput,
    WithdrawInput,
)
from .outputs import (
    AdmissionOutput,
    CaptureOutput,
    ForgetOutput,
    GetOutput,
    SearchOutput,
    WithdrawOutput,
)

SEARCH = "engram_memory_search"
GET = "engram_memory_get"
CAPTURE = "engram_memory_capture"
REQUEST_ADMISSION = "engram_memory_request_admission"
WITHDRAW = "engram_memory_withdraw"
FORGET = "engram_memory_forget"


def _inlined(schema: dict[str, Any]) -> dict[str, Any]:
    """``schema`` with every local ``$ref`` replaced by the definition it names, and no
    ``$defs``: the same constraints, in one self-contained tree.

    Why: a host's validator descends once more for each ``$ref`` it meets (the MCP SDK
    client checks every tool result this way: about a quarter of that check's time on a
    search envelope, measured in docs/results/), and some hosts resolve ``$ref`` in tool
    schemas poorly or not at all. No model here is recursive (that would raise)."""
    defs = schema.get("$defs", {})

    def resolve(node: Any, seen: tuple[str, ...]) -> Any:
        if isinstance(node, list):
            return [resolve(item, seen) for item in node]
        if not isinstance(node, dict):
            return node
        ref = node.get("$ref")
        if ref is None:
            return {k: resolve(v, seen) for k, v in node.items() if k != "$defs"}
        name = ref.removeprefix("#/$defs/")
        if name in seen:
            raise ValueError(f"recursive schema definition {name!r}")
        siblings = {k: resolve(v, seen) for k, v in node.items() if k != "$ref"}
        return {**resolve(defs[name], (*seen, name)), **siblings}

    return resolve(schema, ())


def _closed(schema: Any) -> Any:
    """Close every object schema and drop `default: null` throughout."""
    if isinstance(schema, dict):
        out = {k: _closed(v) for k, v in schema.items() if not (k == "default" and v is None)}
        if out.get("type") == "object" and "properties" in out:
            out["additionalProperties"] = False
        return out
    if isinstance(schema, list):
        return [_closed(item) for item in schema]
    return schema


class ConfirmWhen(Enum):
    """When a confirmable tool needs a host confirmation (contract section 0)."""

    ALWAYS = "always"  # on every call
    LISTED = "listed"  # where the host lists the tool in the context's `confirm` claim


@dataclass(frozen=True)
class ConfirmationRule:
    """A tool's confirmation gate: an approval bound to one operation on one target."""

    when: ConfirmWhen
    #: The argument naming the target the approval is bound to (a capture has no target
    #: before it commits, so its idempotency key stands in).
    target: str
    #: How the human is asked: "<verb> <target>?".
    verb: str


@dataclass(frozen=True)
class ToolSpec:
    """One tool: its name, description, models and schemas, and its policy."""

    name: str
    description: str
    input_model: type[BaseModel]
    output_model: type[BaseModel]
    #: It changes memory: its arguments are kept (so scanned for secrets), its audit line
    #: is on disk before it answers, and a fault once it began is an unknown outcome.
    mutation: bool = False
    #: It ends something for good (the `destructiveHint` of `tools/list`).
    destructive: bool = False
    confirmation: ConfirmationRule | None = None
    #: The path of keys from the arguments to the `purpose_ref` that must equal the
    #: context's bound purpose; empty for a tool without one.
    purpose_ref: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if (self.destructive or self.confirmation is not None) and not self.mutation:
            raise ValueError(f"{self.name}: only a mutation can be destructive or confirmed")

    def needs_confirmation(self, listed: Collection[str]) -> bool:
        """Whether a call must carry a valid host confirmation, given the tools the
        context lists in its `confirm` claim."""
        rule = self.confirmation
        if rule is None:
            return False
        return rule.when is ConfirmWhen.ALWAYS or self.name in listed

    def confirmation_target(self, arguments: Mapping[str, Any]) -> str | None:
        """The target a confirmation binds to, read from ``arguments``: None for a tool
        without confirmation, or when the argument is absent or not a string."""
        if self.confirmation is None:
            return None
        value = arguments.get(self.confirmation.target)
        return value if isinstance(value, str) else None

    @cached_property
    def input_schema(self) -> dict[str, Any]:
        return _closed(_inlined(self.input_model.model_json_schema()))

    @cached_property
    def output_schema(self) -> dict[str, Any]:
        """Schema of the envelope (the MCP structuredContent): success or failure."""
        success = SuccessEnvelope[self.output_model].model_json_schema()  # type: ignore[name-defined]
        failure = FailureEnvelope.model_json_schema()
        defs = {**success.pop("$defs", {}), **failure.pop("$defs", {})}
        return _closed(_inlined({"type": "object", "anyOf": [success, failure], "$defs": defs}))


#: What every mutation's description says of its key: the schema can bound characters
#: only (minLength 4), the runtime counts bytes.
_KEY_RULE = " idempotency_key: 16 to 256 UTF-8 bytes (a shorter one is INVALID_SCHEMA)."

TOOLS: dict[str, ToolSpec] = {
    spec.name: spec
    for spec in (
        ToolSpec(
            SEARCH,
            "Search current memory (accepted_current records only). Returns redacted records "
            "with citations, a rank receipt, and next_page_cursor when more results exist.",
            SearchInput,
            SearchOutput,
            purpose_ref=("purpose_ref",),
        ),
        ToolSpec(
            GET,
            "Read one known current record by record_id, without ranking, with a read receipt.",
            GetInput,
            GetOutput,
            purpose_ref=("purpose_ref",),
        ),
        ToolSpec(
            CAPTURE,
            "Submit cited, durable knowledge as an encrypted pending candidate. Not searchable "
            "until admitted. Never include secrets or credentials." + _KEY_RULE,
            CaptureInput,
            CaptureOutput,
            mutation=True,
            confirmation=ConfirmationRule(ConfirmWhen.LISTED, "idempotency_key", "Capture with key"),
            purpose_ref=("payload", "purpose_ref"),
        ),
        ToolSpec(
            REQUEST_ADMISSION,
            "Ask the host's admission policy to decide a pending candidate." + _KEY_RULE,
            AdmissionInput,
            AdmissionOutput,
            mutation=True,
            confirmation=ConfirmationRule(ConfirmWhen.LISTED, "candidate_id", "Admit candidate"),
        ),
        ToolSpec(
            WITHDRAW,
            "End a pending candidate (needs host confirmation). Destroys its body key." + _KEY_RULE,
            WithdrawInput,
            WithdrawOutput,
            mutation=True,
            destructive=True,
            confirmation=ConfirmationRule(ConfirmWhen.ALWAYS, "candidate_id", "Withdraw candidate"),
        ),
        ToolSpec(
            FORGET,
            "Make an accepted record permanently ineligible (needs host confirmation); purges it from every index."
            + _KEY_RULE,
            ForgetInput,
            ForgetOutput,
            mutation=True,
            destructive=True,
            confirmation=ConfirmationRule(ConfirmWhen.ALWAYS, "record_id", "Forget record"),
        ),
    )
}


def _only_digest_errors(error: ValidationError) -> bool:
    return all(item["type"] == "invalid_digest" for item in error.errors())


#: The bounds of a broken rule that may be named beside it: the schema's, never the input's.
_RULE_BOUNDS = ("min_length", "max_length", "min_bytes", "max_bytes", "ge", "gt", "le", "lt", "expected")


def violations(error: ValidationError) -> str:
    """Each failed field of `error` as ``path: rule`` (e.g. ``idempotency_key:
    string_too_short(min_length=16)``): where and which rule, never the value."""
    parts = []
    for item in error.errors(include_url=False, include_input=False):
        path = ".".join(str(step) for step in item["loc"]) or "(arguments)"
        bounds = ", ".join(f"{k}={item['ctx'][k]}" for k in _RULE_BOUNDS if k in item.get("ctx", {}))
        parts.append(f"{path}: {item['type']}" + (f"({bounds})" if bounds else ""))
    return "; ".join(parts)


def parse_arguments(tool: str, arguments: Any) -> BaseModel:
    """Validate raw tool arguments into the tool's input model.

    Raises ContractError(INVALID_DIGEST) when the only faults are malformed digests,
    INVALID_SCHEMA for anything else. Never echoes input.
    """
    spec = TOOLS[tool]
    if not isinstance(arguments, dict):
        raise ContractError(ErrorCode.INVALID_SCHEMA, "(arguments): not an object")
    try:
        size = len(json.dumps(arguments, ensure_ascii=False, separators=(",", ":")).encode())
    except (TypeError, ValueError, UnicodeEncodeError):
        raise ContractError(ErrorCode.INVALID_SCHEMA, "(arguments): not JSON-serialisable") from None
    if size > MAX_ARGUMENT_BYTES:
        raise ContractError(ErrorCode.INVALID_SCHEMA, f"(arguments): over {MAX_ARGUMENT_BYTES} bytes")
    try:
        return spec.input_model.model_validate(arguments, strict=True)
    except ValidationError as error:
        code = ErrorCode.INVALID_DIGEST if _only_digest_errors(error) else ErrorCode.INVALID_SCHEMA
        raise ContractError(code, violations(error)) from None
