"""Bad input over MCP: every tool's arguments fuzzed through a real client and server.

Three generators per tool (inputs valid-ish against the published `input_schema` via
hypothesis-jsonschema, arbitrary JSON objects, and one-path mutations of a well-formed
call), then hand-written nasty cases through the SDK client and as raw JSON-RPC (what
the client refuses to send: duplicate keys, arrays, NaN, lone surrogates, bad UTF-8,
1000-deep nesting, 2 MB strings). Every answer must be a contract envelope (or one of the
contract's two JSON-RPC errors, or for malformed JSON-RPC the right protocol error):
never a 5xx, a traceback, exception text, an echo of the input, or a hang.

ENGRAM_FUZZ_EXAMPLES (default 25) sets the examples per (tool, generator) pair.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import jsonschema_compat
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis_jsonschema import from_schema
from rel_support import (
    ALL_TOOLS,
    FIGURES,
    MODES,
    PURPOSE,
    TOOLS,
    RawRpc,
    SyncDriver,
    assert_no_leak,
    capture_args,
    check_raw_answer,
    code,
    ctx_token,
    env_int,
    key,
    value,
)

from engram.models.tools import CAPTURE, FORGET, GET, REQUEST_ADMISSION, SEARCH, WITHDRAW

jsonschema_compat.install()

EXAMPLES = env_int("ENGRAM_FUZZ_EXAMPLES", 25)
CANARY = "CANARYxq7"
FUZZ_SETTINGS = settings(
    max_examples=EXAMPLES,
    deadline=None,
    database=None,
    derandomize=False,
    suppress_health_check=list(HealthCheck),
)

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=40),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=12,
)


def base_args(tool: str) -> dict[str, Any]:
    """A well-formed call of `tool` (targets unknown where a target is needed)."""
    if tool == SEARCH:
        return {
            "query": "ledger balances",
            "purpose_ref": PURPOSE,
            "limit": 5,
            "max_packet_bytes": 65536,
            "capability_policy": {"minimum_channels": "lexical", "network": "forbid"},
        }
    if tool == GET:
        return {"record_id": "mem_" + "a" * 52, "purpose_ref": PURPOSE, "max_packet_bytes": 65536}
    if tool == CAPTURE:
        args = capture_args("The ledger stores balances in PostgreSQL.", extra_text="context note")
        args["payload"]["retention"] = {"derivative_rule": "make-ineligible"}
        return args
    if tool == REQUEST_ADMISSION:
        return {"candidate_id": "cand_unknown", "idempotency_key": key("admit")}
    if tool == WITHDRAW:
        return {"candidate_id": "cand_unknown", "idempotency_key": key("withdraw"), "reason_ref": "reason:x"}
    return {"record_id": "mem_" + "a" * 52, "idempotency_key": key("forget"), "reason_ref": "reason:x"}


def _paths(value: Any, prefix: tuple = ()) -> list[tuple]:
    out = [prefix]
    if isinstance(value, dict):
        for k, v in value.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out += _paths(v, (*prefix, i))
    return out


@st.composite
def mutated(draw: Any, tool: str) -> dict[str, Any]:
    args = copy.deepcopy(base_args(tool))
    path = draw(st.sampled_from(_paths(args)))
    op = draw(st.sampled_from(["replace", "delete", "extra", "null", "wrap"]))
    if not path:
        args[draw(st.text(min_size=1, max_size=12))] = draw(JSON)
        return args
    parent = args
    for step in path[:-1]:
        parent = parent[step]
    last = path[-1]
    if op == "replace":
        parent[last] = draw(JSON)
    elif op == "delete":
        del parent[last]
    elif op == "null":
        parent[last] = None
    elif op == "wrap":
        parent[last] = [parent[last]]
    else:  # an extra field next to the target (or inside it when it is an object)
        holder = parent[last] if isinstance(parent[last], dict) else parent
        if isinstance(holder, dict):
            holder[draw(st.sampled_from(["confirmed", "tenant", "workspace", "extra", "purpose"]))] = draw(JSON)
        else:
            holder.append(draw(JSON))
    return args


def from_published_schema(tool: str) -> st.SearchStrategy[dict[str, Any]]:
    @st.composite
    def strategy(draw: Any) -> dict[str, Any]:
        args = draw(from_schema(TOOLS[tool].input_schema))
        if draw(st.integers(0, 9)) < 8:  # mostly the bound purpose, so calls reach the engine
            if tool in (SEARCH, GET):
                args["purpose_ref"] = PURPOSE
            elif tool == CAPTURE and isinstance(args.get("payload"), dict):
                args["payload"]["purpose_ref"] = PURPOSE
        return args

    return strategy()


def arbitrary(tool: str) -> st.SearchStrategy[dict[str, Any]]:
    names = sorted(TOOLS[tool].input_schema.get("properties", {}))
    keys = st.sampled_from(names) | st.text(max_size=12)
    return st.dictionaries(keys, JSON, max_size=6)


GENERATORS = {"schema": from_published_schema, "arbitrary": arbitrary, "mutated": mutated}


def purpose_mismatch(tool: str, args: Any) -> bool:
    """Whether the front end must answer -32603 (the bound purpose differs)."""
    holder = args if tool in (SEARCH, GET) else args.get("payload") if tool == CAPTURE else None
    return isinstance(holder, dict) and "purpose_ref" in holder and holder["purpose_ref"] != PURPOSE


@pytest.fixture(scope="module")
def driver(live):
    with SyncDriver(live.url, ctx_token(principal="fuzzer")) as running:
        yield running


@pytest.mark.parametrize("generator", sorted(GENERATORS))
@pytest.mark.parametrize("tool", ALL_TOOLS)
def test_fuzz_tool_arguments(driver, tool, generator):
    outcomes: dict[str, int] = {}

    @FUZZ_SETTINGS
    @given(data=st.data())
    def run(data: Any) -> None:
        args = data.draw(GENERATORS[generator](tool), label="arguments")
        mode = data.draw(st.sampled_from(MODES), label="mode")
        kind, out = driver.call(mode, tool, args)
        FIGURES["fuzz cases over MCP (SDK client)"] += 1
        if kind == "protocol":
            assert purpose_mismatch(tool, args), (out, args)
            outcomes["-32603"] = outcomes.get("-32603", 0) + 1
        else:
            assert not purpose_mismatch(tool, args)
            label = "ok" if out["ok"] else out["error"]["code"]
            outcomes[label] = outcomes.get(label, 0) + 1

    run()
    print(f"{tool}/{generator}: {outcomes}")


# --------------------------------------------------------------------------- nasty, SDK client


def _deep(levels: int, leaf: Any) -> Any:
    out = leaf
    for _ in range(levels):
        out = {"a": out} if levels % 2 else [out]
    return out


def nasty_cases() -> list[tuple[str, str, dict[str, Any]]]:
    big = CANARY + "x" * (2 * 1024 * 1024)
    cases: list[tuple[str, str, dict[str, Any]]] = []
    search = base_args(SEARCH)
    capture = base_args(CAPTURE)

    def with_payload(**changes: Any) -> dict[str, Any]:
        args = copy.deepcopy(capture)
        args["payload"].update(changes)
        return args

    cases += [
        ("search 2MB query", SEARCH, {**search, "query": big}),
        ("capture 2MB text", CAPTURE, with_payload(components=[{**capture["payload"]["components"][0], "text": big}])),
        ("search non-NFC query", SEARCH, {**search, "query": "cafe\u0301 " + CANARY}),
        ("capture non-NFC key", CAPTURE, {**capture, "idempotency_key": "cle\u0301-" + CANARY + "-0123456789"}),
        (
            "capture non-NFC component text",
            CAPTURE,
            with_payload(components=[{**capture["payload"]["components"][0], "text": "Ame\u0301lie " + CANARY}]),
        ),
        ("search deep nesting", SEARCH, {**search, "query": _deep(1000, CANARY)}),
        ("capture deep nesting", CAPTURE, {**capture, "evidence": _deep(1000, CANARY)}),
        ("search extra top-level", SEARCH, {**search, "tenant": "umbrella"}),
        ("search confirmed extra", SEARCH, {**search, "confirmed": True}),
        ("forget confirmed extra", FORGET, {**base_args(FORGET), "confirmed": True}),
        ("capture extra nested", CAPTURE, with_payload(valid_time={"t": 1, "zone": CANARY})),
        ("search null limit", SEARCH, {**search, "limit": None}),
        ("search null cursor", SEARCH, {**search, "page_cursor": None}),
        ("capture null retention", CAPTURE, with_payload(retention=None)),
        ("search limit as string", SEARCH, {**search, "limit": "10"}),
        ("search limit as float", SEARCH, {**search, "limit": 10.0}),
        ("search limit as bool", SEARCH, {**search, "limit": True}),
        ("search limit huge", SEARCH, {**search, "limit": 10**30}),
        ("search limit -0.0", SEARCH, {**search, "limit": -0.0}),
        ("search query as number", SEARCH, {**search, "query": 5}),
        ("search query as list", SEARCH, {**search, "query": [CANARY]}),
        ("search policy as list", SEARCH, {**search, "capability_policy": ["lexical"]}),
        ("capture payload as list", CAPTURE, {**capture, "payload": [capture["payload"]]}),
        ("capture components as object", CAPTURE, with_payload(components={"c1": CANARY})),
        ("capture unsafe integer", CAPTURE, with_payload(valid_time={"t": 2**63})),
        ("capture t_end before t", CAPTURE, with_payload(valid_time={"t": 10, "t_end": 5})),
        (
            "capture bad instant",
            CAPTURE,
            with_payload(retention={"derivative_rule": "make-ineligible", "expires_at": "2030-02-30T00:00:00.000Z"}),
        ),
        (
            "capture past expiry",
            CAPTURE,
            with_payload(retention={"derivative_rule": "make-ineligible", "expires_at": "2001-01-01T00:00:00.000Z"}),
        ),
        ("capture retain", CAPTURE, with_payload(retention={"derivative_rule": "retain"})),
        ("capture unsorted families", CAPTURE, with_payload(reconciliation={"family_refs": ["b", "a"]})),
        (
            "capture uppercase digest",
            CAPTURE,
            {**capture, "evidence": {**capture["evidence"], "evidence_digest": "sha256:" + "AB" * 32}},
        ),
        ("capture short key", CAPTURE, {**capture, "idempotency_key": "short"}),
        ("capture 15-byte key", CAPTURE, {**capture, "idempotency_key": "k" * 15}),
        ("capture key of 4 emoji", CAPTURE, {**capture, "idempotency_key": "\U0001f600" * 4}),
        ("get bad record id", GET, {"record_id": "MEM_" + CANARY, "purpose_ref": PURPOSE}),
        ("get record id with padding", GET, {"record_id": "mem_aaaa=", "purpose_ref": PURPOSE}),
        ("get record id newline", GET, {"record_id": "mem_aaaa\n", "purpose_ref": PURPOSE}),
        ("admission empty", REQUEST_ADMISSION, {}),
        ("admission 2MB candidate id", REQUEST_ADMISSION, {"candidate_id": big, "idempotency_key": key()}),
        ("withdraw control chars", WITHDRAW, {**base_args(WITHDRAW), "reason_ref": "\x00\x1b[31m" + CANARY}),
        ("search page cursor garbage", SEARCH, {**search, "page_cursor": CANARY * 10}),
        ("search NUL query", SEARCH, {**search, "query": "\x00" + CANARY}),
        ("search query syntax", SEARCH, {**search, "query": 'tenant:umbrella OR * AND (" -' + CANARY}),
        ("search 8193-byte query", SEARCH, {**search, "query": "a" * 8193}),
        ("search 4 KiB packet", SEARCH, {**search, "max_packet_bytes": 4096}),
        ("search packet too small", SEARCH, {**search, "max_packet_bytes": 4095}),
    ]
    return cases


NASTY = nasty_cases()


@pytest.mark.parametrize("mode", MODES)
def test_nasty_cases_sdk(driver, mode):
    seen: dict[str, str] = {}
    for name, tool, args in NASTY:
        try:
            kind, out = driver.call(mode, tool, args)
        except (RecursionError, ValueError, TypeError) as exc:
            # The SDK client itself refused to serialise it: sent raw below instead.
            seen[name] = f"client refused ({type(exc).__name__})"
            continue
        FIGURES["nasty cases over MCP (SDK client)"] += 1
        assert kind == "envelope", (name, out)
        text = json.dumps(out)
        assert_no_leak(text, CANARY)
        seen[name] = "ok" if out["ok"] else out["error"]["code"]
    print(json.dumps(seen, indent=1))
    # What the contract names explicitly:
    for name in (
        "search non-NFC query",
        "capture non-NFC key",
        "capture non-NFC component text",
        "search extra top-level",
        "search confirmed extra",
        "forget confirmed extra",
        "capture extra nested",
        "search null limit",
        "search null cursor",
        "capture null retention",
        "search 2MB query",
        "capture 2MB text",
        "search limit as string",
        "search limit as float",
        "capture t_end before t",
        "capture past expiry",
        "capture short key",
        "capture 15-byte key",
        "search 8193-byte query",
        "search packet too small",
        "capture unsorted families",
    ):
        assert seen[name] in ("INVALID_SCHEMA", "client refused (RecursionError)"), (name, seen[name])
    assert seen["capture retain"] == "UNAUTHORIZED"
    assert seen["capture uppercase digest"] == "INVALID_DIGEST"
    assert seen["get bad record id"] == "INVALID_SCHEMA"
    assert seen["search page cursor garbage"] == "STALE_PAGE"
    assert seen["search query syntax"] == "ok"


# --------------------------------------------------------------------------- nasty, raw JSON-RPC


def raw_cases(tool_args: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(name, tool, arguments JSON text spliced verbatim into a tools/call)."""
    search = json.dumps(base_args(SEARCH))[1:-1]
    deep = "[" * 1000 + json.dumps(CANARY) + "]" * 1000
    return [
        ("duplicate purpose_ref", SEARCH, "{" + search + ',"purpose_ref":"other-' + CANARY + '"}'),
        ("duplicate purpose_ref, bound last", SEARCH, '{"purpose_ref":"other-' + CANARY + '",' + search + "}"),
        ("duplicate query", SEARCH, "{" + search + ',"query":"' + CANARY + '"}'),
        (
            "duplicate record_id in forget",
            FORGET,
            '{"record_id":"mem_aaaa","record_id":"mem_bbbb","idempotency_key":"' + key() + '","reason_ref":"r"}',
        ),
        ("arguments array", SEARCH, "[" + json.dumps(base_args(SEARCH)) + "]"),
        ("arguments string", SEARCH, json.dumps(CANARY)),
        ("arguments number", SEARCH, "42"),
        ("arguments null", SEARCH, "null"),
        ("NaN limit", SEARCH, "{" + search.replace('"limit": 5', '"limit": NaN') + "}"),
        ("Infinity limit", SEARCH, "{" + search.replace('"limit": 5', '"limit": Infinity') + "}"),
        ("-Infinity t", CAPTURE, json.dumps(tool_args[CAPTURE]).replace('"t": ', '"t": -Infinity, "x": ', 1)),
        (
            "lone high surrogate",
            SEARCH,
            "{" + search.replace('"ledger balances"', '"ledger \\ud800 ' + CANARY + '"') + "}",
        ),
        (
            "lone low surrogate in key",
            CAPTURE,
            json.dumps(tool_args[CAPTURE]).replace('"idempotency_key": "', '"idempotency_key": "\\udc00', 1),
        ),
        ("surrogate pair escaped", SEARCH, "{" + search.replace('"ledger balances"', '"\\ud83d\\ude00 ledger"') + "}"),
        ("deep nesting 1000", SEARCH, "{" + search + ',"x":' + deep + "}"),
        ("deep nesting 1000 as query", SEARCH, "{" + search.replace('"ledger balances"', deep) + "}"),
        ("2MB string", SEARCH, "{" + search.replace('"ledger balances"', json.dumps(CANARY + "y" * (2 << 20))) + "}"),
        ("truncated", SEARCH, "{" + search),
        ("trailing garbage", SEARCH, "{" + search + "} " + CANARY),
        ("big integer", SEARCH, "{" + search.replace('"limit": 5', '"limit": ' + "9" * 5000) + "}"),
        ("float exponent", SEARCH, "{" + search.replace('"limit": 5', '"limit": 1e400') + "}"),
    ]


def raw_envelopes() -> list[tuple[str, bytes]]:
    """Whole malformed requests."""
    return [
        ("empty body", b""),
        ("not json", b"\xff\xfe" + CANARY.encode()),
        (
            "invalid utf-8 in string",
            b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"engram_memory_search",'
            b'"arguments":{"query":"\xc3\x28' + CANARY.encode() + b'","purpose_ref":"purpose:test"}}}',
        ),
        ("batch", b'[{"jsonrpc":"2.0","id":1,"method":"tools/list"}]'),
        ("no method", b'{"jsonrpc":"2.0","id":1}'),
        ("name is number", b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":5,"arguments":{}}}'),
        ("unknown method", b'{"jsonrpc":"2.0","id":1,"method":"admin/backup","params":{}}'),
        ("id object", b'{"jsonrpc":"2.0","id":{"a":1},"method":"tools/list"}'),
    ]


@pytest.mark.parametrize("mode", MODES)
def test_nasty_cases_raw_jsonrpc(live, mode):
    rpc = RawRpc(live.url, ctx_token(principal="raw-fuzzer"), mode)
    report: dict[str, Any] = {}
    try:
        tool_args = {CAPTURE: base_args(CAPTURE)}
        for name, tool, arguments in raw_cases(tool_args):
            response = rpc.post(rpc.tools_call_body(tool, arguments), tool)
            kind, out = check_raw_answer(tool, response, CANARY)
            FIGURES["nasty cases over raw JSON-RPC"] += 1
            report[name] = out if kind != "envelope" else ("ok" if out["ok"] else out["error"]["code"])
        for name, body in raw_envelopes():
            response = rpc.post(body)
            kind, out = check_raw_answer(SEARCH, response, CANARY)
            FIGURES["nasty cases over raw JSON-RPC"] += 1
            report[name] = out if kind != "envelope" else ("ok" if out["ok"] else out["error"]["code"])
    finally:
        rpc.close()
    print(mode, json.dumps(report, indent=1, default=str))
    # Arguments that are not an object never reach the engine as a success.
    for name in ("arguments array", "arguments string", "arguments number"):
        assert report[name] != "ok", name
    # Duplicate keys are INVALID_SCHEMA once the protocol checks pass; those run on the copy
    # the SDK kept, so a repeated purpose_ref that differs from the bound one stays -32603.
    assert report["duplicate purpose_ref"] == (-32603, "Trusted invocation context unavailable")
    assert report["duplicate query"] == "INVALID_SCHEMA"
    assert report["duplicate record_id in forget"] == "INVALID_SCHEMA"
    for name in (
        "NaN limit",
        "Infinity limit",
        "lone high surrogate",
        "lone low surrogate in key",
        "2MB string",
        "float exponent",
        "big integer",
    ):
        assert report[name] != "ok", (name, report[name])


def test_service_still_healthy_after_fuzzing(live, driver):
    """After all of the above: a normal capture/admit/search works, the journal verifies."""
    marker = "zqhealthy" + key()[-8:]
    for mode in MODES:
        args = capture_args(f"healthy ledger {marker}{mode}")
        kind, env = driver.call(mode, CAPTURE, args)
        cid = value(env)["candidate_id"]
        kind, env_adm = driver.call(mode, REQUEST_ADMISSION, {"candidate_id": cid, "idempotency_key": key("admit")})
        assert value(env_adm)["outcome"]["status"] == "accepted"
        kind, env = driver.call(mode, SEARCH, {"query": f"{marker}{mode}", "purpose_ref": PURPOSE})
        found = value(env)["records"]
        assert found and found[0]["record"]["record_id"] == value(env_adm)["outcome"]["record_id"]
    assert all(live.engine.operator.verify_journal().values())
    kind, env = driver.call("auto", GET, {"record_id": "mem_" + "b" * 52, "purpose_ref": PURPOSE})
    assert code(env) == "NOT_FOUND"
