"""Argument validation: closed schemas, no nulls, strict types, UTF-8 byte bounds, NFC,
instants, digest form, capture cross-references, the 1 MiB cap and constant messages."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from engine_support import (
    CAPTURE,
    FORGET,
    GET,
    MESSAGES,
    PURPOSE,
    REQUEST_ADMISSION,
    SEARCH,
    WITHDRAW,
    ContractError,
    ErrorCode,
    capture_args,
    context,
    error_of,
    key,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engram.models.inputs import MAX_ARGUMENT_BYTES
from engram.models.tools import TOOLS, parse_arguments

INVALID = ErrorCode.INVALID_SCHEMA
RID = "mem_" + "a" * 52


def valid_args() -> dict[str, dict[str, Any]]:
    """One well-formed argument object per tool (candidate and record ids well-formed)."""
    return {
        SEARCH: {
            "query": "billing ledger",
            "purpose_ref": PURPOSE,
            "limit": 5,
            "max_packet_bytes": 8192,
            "capability_policy": {"minimum_channels": "lexical", "network": "forbid"},
        },
        GET: {"record_id": RID, "purpose_ref": PURPOSE, "max_packet_bytes": 4096},
        CAPTURE: full_capture(),
        REQUEST_ADMISSION: {"candidate_id": "cand_x", "idempotency_key": key("adm")},
        WITHDRAW: {"candidate_id": "cand_x", "idempotency_key": key("wdr"), "reason_ref": "reason:x"},
        FORGET: {"record_id": RID, "idempotency_key": key("fgt"), "reason_ref": "reason:x"},
    }


def full_capture() -> dict[str, Any]:
    """A capture with every optional field present (so every nested object exists)."""
    args = capture_args("Ledger decisions are recorded in ADR 7.")
    args["payload"]["valid_time"]["t_end"] = args["payload"]["valid_time"]["t"] + 1000
    args["payload"]["citations"][0]["observed_at"] = "2026-01-02T03:04:05.678Z"
    args["payload"]["retention"] = {"derivative_rule": "make-ineligible", "expires_at": "2099-01-01T00:00:00.000Z"}
    args["payload"]["reconciliation"] = {"family_refs": ["fam:a", "fam:b"]}
    args["evidence"]["attestation"] = "signed by the build host"
    return args


def parse(tool: str, args: Any) -> Any:
    return parse_arguments(tool, args)


def code(tool: str, args: Any) -> ErrorCode:
    return error_of(parse_arguments, tool, args).code


def object_paths(value: Any, path: tuple = ()) -> list[tuple]:
    """Paths of every JSON object inside `value` (the root included)."""
    out = []
    if isinstance(value, dict):
        out.append(path)
        for k, v in value.items():
            out.extend(object_paths(v, path + (k,)))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out.extend(object_paths(v, path + (i,)))
    return out


def leaf_paths(value: Any, path: tuple = ()) -> list[tuple]:
    out = []
    if isinstance(value, dict):
        for k, v in value.items():
            out.extend(leaf_paths(v, path + (k,)))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out.extend(leaf_paths(v, path + (i,)))
    else:
        out.append(path)
    return out


def at(value: Any, path: tuple) -> Any:
    for step in path:
        value = value[step]
    return value


def with_value(args: dict, path: tuple, new: Any) -> dict:
    out = copy.deepcopy(args)
    at(out, path[:-1])[path[-1]] = new
    return out


def without(args: dict, path: tuple) -> dict:
    out = copy.deepcopy(args)
    del at(out, path[:-1])[path[-1]]
    return out


# -- every valid object parses ---------------------------------------------------------------


@pytest.mark.parametrize("tool", sorted(TOOLS))
def test_valid_arguments_parse(tool: str) -> None:
    parse(tool, valid_args()[tool])


# -- closed at every level -------------------------------------------------------------------

CLOSED_CASES = [(tool, path) for tool, args in valid_args().items() for path in object_paths(args)]


@pytest.mark.parametrize(("tool", "path"), CLOSED_CASES, ids=[f"{t}:{'/'.join(map(str, p))}" for t, p in CLOSED_CASES])
def test_extra_field_at_any_level_is_invalid_schema(tool: str, path: tuple) -> None:
    args = copy.deepcopy(valid_args()[tool])
    at(args, path)["confirmed"] = True
    assert code(tool, args) is INVALID


@pytest.mark.parametrize("field", ["tenant", "workspace", "principal", "scope", "confirmed", "elicitationRef"])
def test_host_bound_fields_are_not_arguments(field: str) -> None:
    for tool, args in valid_args().items():
        assert code(tool, {**args, field: "acme"}) is INVALID


# -- optional fields: omitted is fine, null is not -------------------------------------------

OPTIONAL = [
    (SEARCH, ("limit",)),
    (SEARCH, ("max_packet_bytes",)),
    (SEARCH, ("capability_policy",)),
    (SEARCH, ("capability_policy", "network")),
    (SEARCH, ("capability_policy", "minimum_channels")),
    (GET, ("max_packet_bytes",)),
    (CAPTURE, ("payload", "valid_time", "t_end")),
    (CAPTURE, ("payload", "citations", 0, "observed_at")),
    (CAPTURE, ("payload", "retention")),
    (CAPTURE, ("payload", "retention", "expires_at")),
    (CAPTURE, ("payload", "reconciliation")),
    (CAPTURE, ("evidence", "attestation")),
]


@pytest.mark.parametrize(("tool", "path"), OPTIONAL)
def test_optional_field_omitted_parses_but_null_is_invalid(tool: str, path: tuple) -> None:
    args = valid_args()[tool]
    parse(tool, without(args, path))
    assert code(tool, with_value(args, path, None)) is INVALID


def test_page_cursor_null_is_invalid() -> None:
    assert code(SEARCH, {**valid_args()[SEARCH], "page_cursor": None}) is INVALID


@pytest.mark.parametrize("tool", sorted(TOOLS))
def test_null_anywhere_is_invalid(tool: str) -> None:
    args = valid_args()[tool]
    for path in leaf_paths(args):
        assert code(tool, with_value(args, path, None)) is INVALID, path


@pytest.mark.parametrize("tool", sorted(TOOLS))
def test_every_required_field_is_required(tool: str) -> None:
    args = valid_args()[tool]
    optional = {p for t, p in OPTIONAL if t == tool}
    for path in object_paths(args):
        obj = at(args, path)
        for name in obj:
            full = path + (name,)
            if full in optional or isinstance(full[-1], int):
                continue
            assert code(tool, without(args, full)) is INVALID, full


# -- strict types ----------------------------------------------------------------------------

INT_FIELDS = [
    (SEARCH, ("limit",)),
    (SEARCH, ("max_packet_bytes",)),
    (GET, ("max_packet_bytes",)),
    (CAPTURE, ("payload", "valid_time", "t")),
    (CAPTURE, ("payload", "valid_time", "t_end")),
    (CAPTURE, ("payload", "primary_event", "at")),
    (CAPTURE, ("payload", "schema_version")),
]


@pytest.mark.parametrize(("tool", "path"), INT_FIELDS)
def test_integer_fields_refuse_strings_floats_and_bools(tool: str, path: tuple) -> None:
    args = valid_args()[tool]
    good = at(args, path)
    for bad in (str(good), float(good), float(good) + 0.5, True, False, [good], {"v": good}):
        assert code(tool, with_value(args, path, bad)) is INVALID, bad


@pytest.mark.parametrize("tool", sorted(TOOLS))
def test_string_fields_refuse_other_types(tool: str) -> None:
    args = valid_args()[tool]
    for path in leaf_paths(args):
        if isinstance(at(args, path), str):
            for bad in (7, 1.5, True, ["x"], {"x": "y"}):
                assert code(tool, with_value(args, path, bad)) is INVALID, (path, bad)


def test_arguments_must_be_an_object() -> None:
    for bad in (None, [], "query", 3, [valid_args()[SEARCH]]):
        assert code(SEARCH, bad) is INVALID


@pytest.mark.parametrize("value", ["semantic", "LEXICAL", ""])
def test_capability_policy_enums(value: str) -> None:
    args = with_value(valid_args()[SEARCH], ("capability_policy", "minimum_channels"), value)
    assert code(SEARCH, args) is INVALID
    args = with_value(valid_args()[SEARCH], ("capability_policy", "network"), value)
    assert code(SEARCH, args) is INVALID


def test_component_kind_and_schema_version_enums() -> None:
    args = valid_args()[CAPTURE]
    assert code(CAPTURE, with_value(args, ("payload", "components", 0, "kind"), "note")) is INVALID
    assert code(CAPTURE, with_value(args, ("payload", "schema_version"), 1)) is INVALID
    assert code(CAPTURE, with_value(args, ("payload", "retention", "derivative_rule"), "keep")) is INVALID


# -- UTF-8 byte bounds ---------------------------------------------------------------------


def multibyte(n_bytes: int) -> str:
    """A NFC string of exactly n_bytes UTF-8 bytes, mostly 3-byte characters."""
    three, rest = divmod(n_bytes, 3)
    text = "\u20ac" * three + "a" * rest  # euro sign: 3 bytes, NFC
    assert len(text.encode()) == n_bytes
    return text


REF_FIELDS = [
    (SEARCH, ("purpose_ref",)),
    (GET, ("purpose_ref",)),
    (WITHDRAW, ("reason_ref",)),
    (FORGET, ("reason_ref",)),
    (CAPTURE, ("payload", "purpose_ref")),
    (CAPTURE, ("payload", "components", 0, "component_id")),
    (CAPTURE, ("payload", "primary_event", "type_ref")),
    (CAPTURE, ("payload", "citations", 0, "source_ref")),
    (CAPTURE, ("payload", "citations", 0, "locator", "scheme")),
    (CAPTURE, ("evidence", "evidence_ref")),
]


@pytest.mark.parametrize(("tool", "path"), REF_FIELDS)
def test_opaque_refs_are_1_to_512_utf8_bytes(tool: str, path: tuple) -> None:
    args = valid_args()[tool]
    if path[-1] == "component_id":  # keep the cross-references consistent
        args = with_value(args, ("payload", "primary_component_id"), multibyte(512))
    parse(tool, with_value(args, path, multibyte(512)))
    # 171 characters but 513 bytes: a character count would let it through
    assert len(multibyte(513)) < 512
    assert code(tool, with_value(args, path, multibyte(513))) is INVALID
    assert code(tool, with_value(args, path, "")) is INVALID


def test_citation_id_byte_bounds_with_cross_references() -> None:
    args = capture_args(
        "Ledger text",
    )
    big = multibyte(512)
    for where in (("payload", "components", 0, "citation_ids"), ("evidence", "citation_ids")):
        args = with_value(args, where, [big])
    args = with_value(args, ("payload", "citations", 0, "citation_id"), big)
    args = with_value(args, ("payload", "primary_event", "citation_id"), big)
    parse(CAPTURE, args)
    too_big = multibyte(513)
    for where in (("payload", "components", 0, "citation_ids"), ("evidence", "citation_ids")):
        args = with_value(args, where, [too_big])
    args = with_value(args, ("payload", "citations", 0, "citation_id"), too_big)
    args = with_value(args, ("payload", "primary_event", "citation_id"), too_big)
    assert code(CAPTURE, args) is INVALID


def test_query_is_1_to_8192_bytes() -> None:
    args = valid_args()[SEARCH]
    parse(SEARCH, {**args, "query": multibyte(8192)})
    assert code(SEARCH, {**args, "query": multibyte(8193)}) is INVALID
    assert code(SEARCH, {**args, "query": ""}) is INVALID


@pytest.mark.parametrize("tool", [CAPTURE, REQUEST_ADMISSION, WITHDRAW, FORGET])
def test_idempotency_key_is_16_to_256_bytes(tool: str) -> None:
    args = valid_args()[tool]
    parse(tool, {**args, "idempotency_key": "k" * 16})
    parse(tool, {**args, "idempotency_key": multibyte(256)})
    parse(tool, {**args, "idempotency_key": "\u00e9" * 8})  # 8 characters, 16 bytes
    assert code(tool, {**args, "idempotency_key": "k" * 15}) is INVALID
    assert code(tool, {**args, "idempotency_key": "\u00e9" * 7 + "k"}) is INVALID  # 15 bytes
    assert code(tool, {**args, "idempotency_key": multibyte(257)}) is INVALID


def test_component_text_is_1_to_65536_bytes() -> None:
    args = valid_args()[CAPTURE]
    path = ("payload", "components", 0, "text")
    parse(CAPTURE, with_value(args, path, multibyte(65536)))
    assert code(CAPTURE, with_value(args, path, multibyte(65537))) is INVALID
    assert code(CAPTURE, with_value(args, path, "")) is INVALID


def test_locator_value_and_attestation_bounds() -> None:
    args = valid_args()[CAPTURE]
    loc = ("payload", "citations", 0, "locator", "value")
    parse(CAPTURE, with_value(args, loc, multibyte(4096)))
    assert code(CAPTURE, with_value(args, loc, multibyte(4097))) is INVALID
    att = ("evidence", "attestation")
    parse(CAPTURE, with_value(args, att, multibyte(4096)))
    assert code(CAPTURE, with_value(args, att, multibyte(4097))) is INVALID


# -- NFC and surrogates ------------------------------------------------------------------------

DECOMPOSED = "cafe\u0301"  # e + combining acute: not NFC


@pytest.mark.parametrize("tool", sorted(TOOLS))
def test_non_nfc_string_anywhere_is_invalid(tool: str) -> None:
    args = valid_args()[tool]
    for path in leaf_paths(args):
        value = at(args, path)
        if not isinstance(value, str) or path[-1] in (
            "record_id",
            "content_digest",
            "evidence_digest",
            "observed_at",
            "expires_at",
            "kind",
            "derivative_rule",
            "minimum_channels",
            "network",
        ):
            continue
        assert code(tool, with_value(args, path, value + DECOMPOSED)) is INVALID, path
    # the NFC form of the same text is fine
    parse(SEARCH, {**valid_args()[SEARCH], "query": "caf\u00e9"})


@pytest.mark.parametrize("tool", sorted(TOOLS))
def test_lone_surrogate_is_invalid(tool: str) -> None:
    args = valid_args()[tool]
    for path in leaf_paths(args):
        value = at(args, path)
        if isinstance(value, str):
            assert code(tool, with_value(args, path, value + "\ud800")) is INVALID, path
    assert code(tool, {**args, "\udfff": 1}) is INVALID


def test_lone_surrogate_from_a_json_escape_is_invalid() -> None:
    args = json.loads('{"query": "ledger \\ud83d", "purpose_ref": "purpose:test"}')
    assert code(SEARCH, args) is INVALID
    paired = json.loads('{"query": "ledger \\ud83d\\ude00", "purpose_ref": "purpose:test"}')
    parse(SEARCH, paired)


# -- instants ----------------------------------------------------------------------------------

GOOD_INSTANTS = ["2026-01-02T03:04:05.678Z", "2024-02-29T23:59:59.999Z", "1970-01-01T00:00:00.000Z"]
BAD_INSTANTS = [
    "2026-01-02T03:04:05Z",
    "2026-01-02T03:04:05.67Z",
    "2026-01-02T03:04:05.6789Z",
    "2026-01-02T03:04:05.678+00:00",
    "2026-01-02T03:04:05.678+01:00",
    "2026-01-02T03:04:05.678",
    "2026-01-02 03:04:05.678Z",
    "2026-02-30T03:04:05.678Z",
    "2025-02-29T00:00:00.000Z",
    "2026-13-01T00:00:00.000Z",
    "2026-01-02T24:00:00.000Z",
    "2026-01-02t03:04:05.678z",
    "2026-1-2T03:04:05.678Z",
    "\uff12026-01-02T03:04:05.678Z",
    "",
    "1767323045678",
]
INSTANT_FIELDS = [("payload", "citations", 0, "observed_at"), ("payload", "retention", "expires_at")]


@pytest.mark.parametrize("path", INSTANT_FIELDS)
def test_instants(path: tuple) -> None:
    args = valid_args()[CAPTURE]
    for good in GOOD_INSTANTS:
        parse(CAPTURE, with_value(args, path, good))
    for bad in BAD_INSTANTS:
        assert code(CAPTURE, with_value(args, path, bad)) is INVALID, bad


# -- digests -------------------------------------------------------------------------------------

DIGEST_FIELDS = [("payload", "citations", 0, "content_digest"), ("evidence", "evidence_digest")]
BAD_DIGESTS = [
    "sha256:" + "A" * 64,
    "sha256:" + "a" * 63,
    "sha256:" + "a" * 65,
    "sha256:" + "g" * 64,
    "SHA256:" + "a" * 64,
    "sha512:" + "a" * 64,
    "a" * 64,
    "sha256:",
    "sha256: " + "a" * 63,
    "sha256:" + "a" * 64 + "\n",
]


@pytest.mark.parametrize("path", DIGEST_FIELDS)
def test_malformed_digest_alone_is_invalid_digest(path: tuple) -> None:
    args = valid_args()[CAPTURE]
    parse(CAPTURE, with_value(args, path, "sha256:" + "0123456789abcdef" * 4))
    for bad in BAD_DIGESTS:
        assert code(CAPTURE, with_value(args, path, bad)) is ErrorCode.INVALID_DIGEST, bad


@pytest.mark.parametrize("path", DIGEST_FIELDS)
def test_malformed_digest_with_another_fault_is_invalid_schema(path: tuple) -> None:
    args = with_value(valid_args()[CAPTURE], path, "sha256:" + "A" * 64)
    assert code(CAPTURE, {**args, "extra": 1}) is INVALID
    assert code(CAPTURE, with_value(args, ("payload", "valid_time", "t"), "1")) is INVALID
    # a digest of the wrong type is a schema fault, not a digest fault
    assert code(CAPTURE, with_value(valid_args()[CAPTURE], path, 12)) is INVALID


def test_two_malformed_digests_are_invalid_digest() -> None:
    args = valid_args()[CAPTURE]
    for path in DIGEST_FIELDS:
        args = with_value(args, path, "sha256:" + "F" * 64)
    assert code(CAPTURE, args) is ErrorCode.INVALID_DIGEST


# -- record_id form ----------------------------------------------------------------------------


@pytest.mark.parametrize("bad", ["mem_", "mem_ABC", "mem_abc1", "mem_abc8", "cand_abc", "MEM_abc", "mem_abc "])
def test_record_id_pattern(bad: str) -> None:
    assert code(GET, {**valid_args()[GET], "record_id": bad}) is INVALID
    assert code(FORGET, {**valid_args()[FORGET], "record_id": bad}) is INVALID


# -- capture cross-references -------------------------------------------------------------------


def two_citations() -> dict:
    args = capture_args("Ledger decisions are recorded in ADR 7.")
    second = copy.deepcopy(args["payload"]["citations"][0])
    second["citation_id"] = "cit2"
    args["payload"]["citations"].append(second)
    args["payload"]["components"].append(
        {"component_id": "c2", "kind": "context", "text": "context", "citation_ids": ["cit2"]}
    )
    return args


def test_two_citation_capture_parses() -> None:
    parse(CAPTURE, two_citations())


CROSS_REFERENCE_BREAKS = {
    "duplicate citation_id": lambda a: a["payload"]["citations"][1].update(citation_id="cit1"),
    "duplicate component_id": lambda a: a["payload"]["components"][1].update(component_id="c1"),
    "component cites unknown citation": lambda a: a["payload"]["components"][1].update(citation_ids=["nope"]),
    "component citation_ids not unique": lambda a: a["payload"]["components"][1].update(citation_ids=["cit2", "cit2"]),
    "component citation_ids empty": lambda a: a["payload"]["components"][1].update(citation_ids=[]),
    "primary component unresolved": lambda a: a["payload"].update(primary_component_id="c9"),
    "primary event citation unknown": lambda a: a["payload"]["primary_event"].update(citation_id="nope"),
    "primary event citation not in primary component": lambda a: a["payload"]["primary_event"].update(
        citation_id="cit2"
    ),
    "evidence cites unknown citation": lambda a: a["evidence"].update(citation_ids=["cit1", "nope"]),
    "evidence citation_ids not unique": lambda a: a["evidence"].update(citation_ids=["cit1", "cit1"]),
    "evidence citation_ids empty": lambda a: a["evidence"].update(citation_ids=[]),
    "no components": lambda a: a["payload"].update(components=[]),
    "no citations": lambda a: a["payload"].update(citations=[]),
    "t_end before t": lambda a: a["payload"]["valid_time"].update(t_end=a["payload"]["valid_time"]["t"] - 1),
    "unsafe t": lambda a: a["payload"]["valid_time"].update(t=2**53),
    "unsafe primary_event.at": lambda a: a["payload"]["primary_event"].update(at=-(2**53)),
}


@pytest.mark.parametrize("name", sorted(CROSS_REFERENCE_BREAKS))
def test_capture_cross_reference_rules(name: str) -> None:
    args = two_citations()
    CROSS_REFERENCE_BREAKS[name](args)
    assert code(CAPTURE, args) is INVALID


def test_valid_time_bounds() -> None:
    args = two_citations()
    t = args["payload"]["valid_time"]["t"]
    parse(CAPTURE, with_value(args, ("payload", "valid_time"), {"t": t, "t_end": t}))
    parse(CAPTURE, with_value(args, ("payload", "valid_time"), {"t": 2**53 - 1}))
    parse(CAPTURE, with_value(args, ("payload", "valid_time"), {"t": -(2**53 - 1)}))


def test_list_size_limits() -> None:
    base = capture_args("Ledger decisions are recorded in ADR 7.")
    cite = base["payload"]["citations"][0]

    def with_citations(n: int) -> dict:
        args = copy.deepcopy(base)
        ids = ["cit1"] + [f"other{i}" for i in range(n - 1)]
        args["payload"]["citations"] = [{**cite, "citation_id": i} for i in ids]
        args["payload"]["components"][0]["citation_ids"] = ids
        args["evidence"]["citation_ids"] = ids
        return args

    parse(CAPTURE, with_citations(256))
    assert code(CAPTURE, with_citations(257)) is INVALID

    def with_components(n: int) -> dict:
        args = copy.deepcopy(base)
        comp = args["payload"]["components"][0]
        args["payload"]["components"] = [comp] + [
            {**comp, "component_id": f"x{i}", "kind": "context"} for i in range(n - 1)
        ]
        return args

    parse(CAPTURE, with_components(64))
    assert code(CAPTURE, with_components(65)) is INVALID


def test_reconciliation_family_refs() -> None:
    args = valid_args()[CAPTURE]
    path = ("payload", "reconciliation", "family_refs")
    parse(CAPTURE, with_value(args, path, []))
    parse(CAPTURE, with_value(args, path, sorted(f"fam:{i:03d}" for i in range(64))))
    assert code(CAPTURE, with_value(args, path, sorted(f"fam:{i:03d}" for i in range(65)))) is INVALID
    assert code(CAPTURE, with_value(args, path, ["fam:b", "fam:a"])) is INVALID
    assert code(CAPTURE, with_value(args, path, ["fam:a", "fam:a"])) is INVALID
    assert code(CAPTURE, with_value(args, path, ["fam:a", ""])) is INVALID


# -- numeric bounds of search and get ---------------------------------------------------------


def test_limit_bounds() -> None:
    args = valid_args()[SEARCH]
    for good in (1, 50):
        parse(SEARCH, {**args, "limit": good})
    for bad in (0, 51, -1):
        assert code(SEARCH, {**args, "limit": bad}) is INVALID


@pytest.mark.parametrize("tool", [SEARCH, GET])
def test_max_packet_bytes_bounds(tool: str) -> None:
    args = valid_args()[tool]
    for good in (4096, 1_048_576):
        parse(tool, {**args, "max_packet_bytes": good})
    for bad in (4095, 1_048_577, 0):
        assert code(tool, {**args, "max_packet_bytes": bad}) is INVALID


def test_defaults() -> None:
    parsed = parse(SEARCH, {"query": "q", "purpose_ref": PURPOSE})
    assert (parsed.limit, parsed.max_packet_bytes) == (10, 65_536)
    assert parsed.capability_policy.minimum_channels == "lexical"
    assert parsed.capability_policy.network == "forbid"
    assert parse(GET, {"record_id": RID, "purpose_ref": PURPOSE}).max_packet_bytes == 65_536


# -- the 1 MiB argument cap ----------------------------------------------------------------------


def sized_capture(total: int) -> dict:
    """A valid capture whose compact JSON is exactly `total` UTF-8 bytes."""
    args = capture_args("x")
    comp = args["payload"]["components"][0]
    comps = [comp] + [{**comp, "component_id": f"p{i:02d}", "kind": "context", "text": "x"} for i in range(20)]
    args["payload"]["components"] = comps

    def size() -> int:
        return len(json.dumps(args, ensure_ascii=False, separators=(",", ":")).encode())

    missing = total - size()
    for c in comps[1:]:
        grow = min(missing, 65_536 - len(c["text"]))
        c["text"] += "y" * grow
        missing -= grow
    assert size() == total
    return args


def test_argument_cap_is_one_mebibyte() -> None:
    parse(CAPTURE, sized_capture(MAX_ARGUMENT_BYTES))
    assert code(CAPTURE, sized_capture(MAX_ARGUMENT_BYTES + 1)) is INVALID


# -- messages are constant --------------------------------------------------------------------

MARKER = "Zyzzyva-marker-7"


def test_messages_never_echo_input() -> None:
    cases = [
        (SEARCH, {"query": MARKER, "purpose_ref": PURPOSE, MARKER: MARKER}),
        (SEARCH, {"query": MARKER * 2000, "purpose_ref": PURPOSE}),
        (GET, {"record_id": MARKER, "purpose_ref": PURPOSE}),
        (CAPTURE, with_value(valid_args()[CAPTURE], DIGEST_FIELDS[0], "sha256:" + MARKER)),
        (CAPTURE, with_value(valid_args()[CAPTURE], ("payload", "primary_component_id"), MARKER)),
        (FORGET, {"record_id": RID, "idempotency_key": MARKER[:10], "reason_ref": MARKER}),
    ]
    for tool, args in cases:
        err = error_of(parse_arguments, tool, args)
        for text in (err.message, str(err), repr(err), *map(str, err.args)):
            assert MARKER not in text
        assert err.message == MESSAGES[err.code]


def test_every_code_has_a_constant_message() -> None:
    for code_ in ErrorCode:
        err = ContractError(code_)
        assert err.message == MESSAGES[code_] and err.message
        assert str(err) == code_.value


# -- via the engine -----------------------------------------------------------------------------


def test_engine_execute_validates_before_anything(engine) -> None:
    ctx = context()
    args = capture_args("Ledger decisions are recorded in ADR 7.")
    assert error_of(engine.execute, CAPTURE, ctx, {**args, "confirmed": True}).code is INVALID
    bad_digest = with_value(args, DIGEST_FIELDS[0], "sha256:" + "A" * 64)
    assert error_of(engine.execute, CAPTURE, ctx, bad_digest).code is ErrorCode.INVALID_DIGEST
    assert error_of(engine.execute, SEARCH, ctx, {"query": "x", "purpose_ref": PURPOSE, "limit": None}).code is INVALID
    assert error_of(engine.execute, GET, ctx, {"record_id": "cand_x", "purpose_ref": PURPOSE}).code is INVALID
    # nothing was written by the refused calls
    assert engine.deps.store.scope_cursor(ctx.scope) == 0
    assert error_of(engine.execute, "engram_memory_admin", ctx, {}).code is ErrorCode.CAPABILITY_UNAVAILABLE


# -- published schemas -----------------------------------------------------------------------------


def walk(schema: Any, path: str = "$"):
    yield path, schema
    if isinstance(schema, dict):
        for k, v in schema.items():
            yield from walk(v, f"{path}.{k}")
    elif isinstance(schema, list):
        for i, v in enumerate(schema):
            yield from walk(v, f"{path}[{i}]")


@pytest.mark.parametrize("tool", sorted(TOOLS))
def test_published_input_schema_is_closed_without_null(tool: str) -> None:
    schema = TOOLS[tool].input_schema
    objects = 0
    for path, node in walk(schema):
        if isinstance(node, dict):
            if node.get("type") == "object" or "properties" in node:
                objects += 1
                assert node.get("additionalProperties") is False, path
            assert not ("default" in node and node["default"] is None), path
            assert node.get("type") != "null", path
            assert "null" not in (node.get("type") if isinstance(node.get("type"), list) else []), path
    assert objects >= 1
    assert schema["additionalProperties"] is False
    # what is required in the schema matches what the runtime requires
    required = set(schema.get("required", []))
    assert required == {k for k in valid_args()[tool] if code_without(tool, k)}


def code_without(tool: str, name: str) -> bool:
    try:
        parse_arguments(tool, {k: v for k, v in valid_args()[tool].items() if k != name})
    except ContractError:
        return True
    return False


@pytest.mark.parametrize("tool", sorted(TOOLS))
def test_published_output_schema_is_closed(tool: str) -> None:
    for path, node in walk(TOOLS[tool].output_schema):
        if isinstance(node, dict) and "properties" in node:
            assert node.get("additionalProperties") is False, path


def _mutations(value: Any, path: tuple = ()):
    """(path, mutated copy) for each object given an unknown member and each leaf given a
    value of another JSON type, anywhere in ``value``."""
    if isinstance(value, dict):
        yield path, {**value, "zz_unknown": 1}
        for k, v in value.items():
            for sub, mutated in _mutations(v, (*path, k)):
                yield sub, {**value, k: mutated}
    elif isinstance(value, list):
        for i, v in enumerate(value):
            for sub, mutated in _mutations(v, (*path, i)):
                yield sub, [*value[:i], mutated, *value[i + 1 :]]
    elif isinstance(value, bool) or value is None:
        yield path, "not-a-boolean-or-null"
    elif isinstance(value, (int, float)):
        yield path, "not-a-number"
    else:
        yield path, 12345


def test_published_schemas_are_self_contained_and_hold_every_nested_object(make_engine) -> None:
    """No `$ref` anywhere (definitions inlined), and the output schema still accepts each
    tool's real envelope and rejects it with an unknown member in any of its objects or a
    leaf of another type at any depth."""
    import jsonschema
    from engine_support import accept, capture, forget, get, search, withdraw

    from engram.models.envelope import failure_envelope, success_envelope

    for spec in TOOLS.values():
        assert "$ref" not in json.dumps(spec.input_schema) + json.dumps(spec.output_schema)
    eng = make_engine()
    ctx = context()
    record_id = accept(eng, ctx, "the billing ledger closes on fridays")
    _, pending = capture(eng, ctx, "a pending note about the ledger")
    outputs = {
        SEARCH: search(eng, ctx, "billing ledger"),
        GET: get(eng, ctx, record_id),
        CAPTURE: capture(eng, ctx, "another note on invoices")[1],
        REQUEST_ADMISSION: eng.execute(
            REQUEST_ADMISSION, ctx, {"candidate_id": pending["candidate_id"], "idempotency_key": key("adm")}
        ),
        WITHDRAW: withdraw(eng, ctx, capture(eng, ctx, "a note to withdraw")[1]["candidate_id"]),
        FORGET: forget(eng, ctx, record_id),
    }
    audit = "aud_" + "0" * 32
    for tool, value in outputs.items():
        validator = jsonschema.Draft202012Validator(TOOLS[tool].output_schema)
        for envelope in (success_envelope(value, audit), failure_envelope(ErrorCode.INVALID_SCHEMA, audit)):
            envelope = json.loads(json.dumps(envelope))
            assert validator.is_valid(envelope), tool
            mutated = list(_mutations(envelope))
            assert len(mutated) >= 8  # the smallest, a failure envelope: 2 objects, 6 leaves
            for path, bad in mutated:
                assert not validator.is_valid(bad), (tool, path)


# -- fuzz: garbage never escapes as anything but ContractError -------------------------------------

json_leaf = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**60), max_value=2**60),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=40),
    st.sampled_from(
        [
            "sha256:" + "a" * 64,
            "mem_abc",
            "cand_x",
            PURPOSE,
            "2026-01-02T03:04:05.678Z",
            "idem-key-0000000000",
            "\ud800",
            "e\u0301",
        ]
    ),
)
json_values = st.recursive(
    json_leaf,
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.dictionaries(
            st.one_of(
                st.text(max_size=12),
                st.sampled_from(
                    [
                        "query",
                        "purpose_ref",
                        "payload",
                        "evidence",
                        "components",
                        "text",
                        "record_id",
                        "candidate_id",
                        "idempotency_key",
                        "citations",
                        "limit",
                        "valid_time",
                        "t",
                    ]
                ),
            ),
            children,
            max_size=5,
        ),
    ),
    max_leaves=25,
)


@settings(max_examples=100, deadline=None)
@given(tool=st.sampled_from(sorted(TOOLS)), garbage=json_values)
def test_garbage_only_raises_contract_errors(tool: str, garbage: Any) -> None:
    try:
        parse_arguments(tool, garbage)
    except ContractError as exc:
        assert exc.code in (ErrorCode.INVALID_SCHEMA, ErrorCode.INVALID_DIGEST)


@st.composite
def mutated_capture(draw) -> dict:
    """A valid capture with one leaf replaced, one key dropped or one key added."""
    args = full_capture()
    leaves = leaf_paths(args)
    path = draw(st.sampled_from(leaves))
    action = draw(st.sampled_from(["replace", "drop", "add"]))
    if action == "replace":
        return with_value(args, path, draw(json_values))
    if action == "drop":
        return without(args, path)
    obj_path = draw(st.sampled_from(object_paths(args)))
    out = copy.deepcopy(args)
    at(out, obj_path)[draw(st.text(min_size=1, max_size=8))] = draw(json_leaf)
    return out


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(args=mutated_capture())
def test_mutated_captures_only_raise_contract_errors(engine, args: dict) -> None:
    try:
        result = engine.execute(CAPTURE, context(), args)
    except ContractError as exc:
        assert exc.message == MESSAGES[exc.code]
    else:
        assert result["status"] in ("committed_pending", "duplicate_exact")


def test_valid_capture_round_trips_through_json_and_engine(engine) -> None:
    args = json.loads(json.dumps(full_capture()))
    args["payload"]["retention"] = {"derivative_rule": "make-ineligible"}
    args["payload"].pop("reconciliation")
    out = engine.execute(CAPTURE, context(), args)
    assert out["status"] == "committed_pending"


@pytest.mark.parametrize(
    ("tool", "field"), [(REQUEST_ADMISSION, "candidate_id"), (WITHDRAW, "candidate_id"), (SEARCH, "page_cursor")]
)
def test_opaque_ids_are_1_to_1024_bytes(tool: str, field: str) -> None:
    args = valid_args()[tool]
    parse(tool, {**args, field: multibyte(1024)})
    assert code(tool, {**args, field: multibyte(1025)}) is INVALID
    assert code(tool, {**args, field: ""}) is INVALID
    assert code(tool, {**args, field: DECOMPOSED}) is INVALID


def test_unknown_opaque_ids_are_not_found_or_stale(engine) -> None:
    ctx = context()
    assert (
        error_of(
            engine.execute, REQUEST_ADMISSION, ctx, {"candidate_id": multibyte(1024), "idempotency_key": key()}
        ).code
        is ErrorCode.NOT_FOUND
    )
    assert (
        error_of(engine.execute, SEARCH, ctx, {"query": "q", "purpose_ref": PURPOSE, "page_cursor": "x" * 1024}).code
        is ErrorCode.STALE_PAGE
    )


def test_an_invalid_schema_call_logs_the_field_and_rule_never_the_value(engine, caplog) -> None:
    """The envelope's message stays the code's fixed one; the server's log says which
    field broke which rule (an 11-character key: 16 UTF-8 bytes needed), without it."""
    import logging

    short = "k" * 10 + "Z"
    args = {**capture_args("The ferry timetable changes in winter."), "idempotency_key": short}
    with caplog.at_level(logging.INFO, logger="engram.engine"):
        with pytest.raises(ContractError) as err:
            engine.execute(CAPTURE, context(), args)
    assert err.value.code is INVALID and err.value.message == MESSAGES[INVALID]
    logged = [r for r in caplog.records if "refused INVALID_SCHEMA" in r.getMessage()]
    assert logged, caplog.text
    assert "idempotency_key: byte_bounds(min_bytes=16, max_bytes=256)" in logged[0].getMessage()
    assert logged[0].fields["violations"].startswith("idempotency_key:")  # type: ignore[attr-defined]
    assert short not in caplog.text and "ferry" not in caplog.text


def test_the_json_log_line_carries_the_structured_fields() -> None:
    import logging

    from engram.service.logs import JsonFormatter

    record = logging.LogRecord("engram.engine", logging.INFO, __file__, 1, "refused", None, None)
    record.fields = {"tool": CAPTURE, "violations": "idempotency_key: byte_bounds"}
    line = json.loads(JsonFormatter().format(record))
    assert line["violations"] == "idempotency_key: byte_bounds" and line["tool"] == CAPTURE
    assert line["message"] == "refused" and line["level"] == "info"


@pytest.mark.parametrize("tool", [CAPTURE, REQUEST_ADMISSION, WITHDRAW, FORGET])
def test_every_mutation_states_the_key_length_in_bytes(tool: str) -> None:
    spec = TOOLS[tool]
    assert "16 to 256 UTF-8 bytes" in spec.description
    assert "16 to 256 UTF-8 bytes" in spec.input_schema["properties"]["idempotency_key"]["description"]
