"""A tool is its spec: one more tool, defined here in one place (a `ToolSpec` and its
engine operation), is listed, validated, purpose-checked, scanned, gated, confirmed
through elicitation and audited by the real engine and server, with no other edit.
"""

from __future__ import annotations

import contextlib
import json
import uuid
from collections.abc import AsyncIterator
from typing import Any

import httpx2
import mcp_types as types
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp_support import ALL_TOOLS, MODES, SECRET, ServerThread, claims

from engram.models.encoding import IdempotencyKey, OpaqueRef
from engram.models.host_token import HEADER, mint_token
from engram.models.inputs import Closed, OpaqueId
from engram.models.tools import TOOLS, ConfirmationRule, ConfirmWhen, ToolSpec
from engram.service.engine import AUDIT_FILE, now_ms
from engram.service.engine.gates import require_confirmation

pytestmark = pytest.mark.anyio

FLAG = "engram_memory_flag"
PURPOSE = "purpose:test"


class FlagInput(Closed):
    record_id: OpaqueId
    idempotency_key: IdempotencyKey
    purpose_ref: OpaqueRef
    reason_ref: OpaqueRef


class FlagOutput(Closed):
    flagged: str


SPEC = ToolSpec(
    FLAG,
    "Flag a record for review (needs host confirmation).",
    FlagInput,
    FlagOutput,
    mutation=True,
    confirmation=ConfirmationRule(ConfirmWhen.ALWAYS, "record_id", "Flag record"),
    purpose_ref=("purpose_ref",),
)


def flag(deps: Any, ctx: Any, args: FlagInput) -> dict[str, Any]:
    """The engine operation: the confirmation gate in its own transaction, then the answer."""
    arguments = args.model_dump(exclude_none=True)
    with deps.store.transaction() as tx:
        require_confirmation(ctx, FLAG, arguments, now_ms(), tx.claim_confirmation)
    return {"flagged": args.record_id}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    from engram.service.engine.engine import OPERATIONS, Engine
    from engram.service.http.app import create_app
    from engram.service.settings import Settings

    with pytest.MonkeyPatch.context() as patch:
        patch.setitem(TOOLS, FLAG, SPEC)
        patch.setitem(OPERATIONS, FLAG, flag)
        data_dir = tmp_path_factory.mktemp("seventh-tool")
        engine = Engine.open(data_dir, load_model=False)
        engine.operator.set_tenant_enabled("acme", True)
        app = create_app(engine, Settings(data_dir=data_dir, rate=0), host_secret=SECRET)
        with ServerThread(app) as running:
            running.data_dir = data_dir
            yield running
        engine.close()


class Human:
    """Approves every question it is asked, and keeps them."""

    def __init__(self) -> None:
        self.questions: list[str] = []

    async def __call__(self, context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        self.questions.append(params.message)
        return types.ElicitResult(action="accept", content={"approve": True})


@contextlib.asynccontextmanager
async def client(url: str, mode: str, human: Human | None) -> AsyncIterator[Client]:
    token = mint_token(claims(purpose=PURPOSE, tools=[*ALL_TOOLS, FLAG]), SECRET)
    async with httpx2.AsyncClient(headers={HEADER: token}, timeout=httpx2.Timeout(30.0)) as http:
        async with Client(
            streamable_http_client(url, http_client=http), mode=mode, elicitation_callback=human
        ) as connected:
            yield connected


def flag_args(**overrides: Any) -> dict[str, Any]:
    args = {
        "record_id": "mem_" + uuid.uuid4().hex,
        "idempotency_key": f"flag-{uuid.uuid4().hex}",
        "purpose_ref": PURPOSE,
        "reason_ref": "reason:review",
    }
    return {**args, **overrides}


def error_code(envelope: dict[str, Any]) -> str:
    assert envelope["ok"] is False, envelope
    return envelope["error"]["code"]


@pytest.mark.parametrize("mode", MODES)
async def test_listed_with_its_schema_and_hints(server, mode):
    async with client(server.url, mode, Human()) as connected:
        listed = {tool.name: tool for tool in (await connected.list_tools()).tools}
    assert set(listed) == {*ALL_TOOLS, FLAG}
    tool = listed[FLAG]
    assert tool.input_schema == SPEC.input_schema and tool.input_schema["additionalProperties"] is False
    assert tool.annotations.read_only_hint is False and tool.annotations.destructive_hint is False


@pytest.mark.parametrize("mode", MODES)
async def test_validated_and_purpose_checked(server, mode):
    async with client(server.url, mode, Human()) as connected:
        extra = await connected.call_tool(FLAG, flag_args(colour="red"))
        assert error_code(extra.structured_content) == "INVALID_SCHEMA"
        with pytest.raises(MCPError) as refused:
            await connected.call_tool(FLAG, flag_args(purpose_ref="purpose:other"))
        assert refused.value.code == -32603


@pytest.mark.parametrize("mode", MODES)
async def test_kept_arguments_are_scanned_for_secrets(server, mode):
    async with client(server.url, mode, Human()) as connected:
        leaked = await connected.call_tool(FLAG, flag_args(reason_ref="AKIA" + "QWERTYUIOPASDFGH"))
    assert error_code(leaked.structured_content) == "SECRET_DETECTED"


@pytest.mark.parametrize("mode", MODES)
async def test_gated_without_a_human(server, mode):
    async with client(server.url, mode, None) as connected:
        unconfirmed = await connected.call_tool(FLAG, flag_args())
    assert error_code(unconfirmed.structured_content) == "gate_failed"


@pytest.mark.parametrize("mode", MODES)
async def test_confirmed_through_elicitation_and_audited(server, mode):
    human = Human()
    args = flag_args()
    async with client(server.url, mode, human) as connected:
        done = await connected.call_tool(FLAG, args)
    envelope = done.structured_content
    assert envelope["ok"] is True, envelope
    assert envelope["output"]["value"] == {"flagged": args["record_id"]}
    assert len(human.questions) == 1
    assert human.questions[0].startswith(f"engram memory: Flag record {args['record_id']}? ({FLAG}, record_id=")
    lines = [json.loads(line) for line in (server.data_dir / AUDIT_FILE).read_text().splitlines()]
    audited = [line for line in lines if line["auditId"] == envelope["auditId"]]
    assert [(line["tool"], line["code"], line["tenant"]) for line in audited] == [(FLAG, "ok", "acme")]


def purpose_paths(schema: dict[str, Any], path: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """Every path of object keys to a `purpose_ref` property in a closed input schema."""
    found = []
    for name, node in schema.get("properties", {}).items():
        if name == "purpose_ref":
            found.append((*path, name))
        found.extend(purpose_paths(node, (*path, name)))
    return found


@pytest.mark.parametrize("tool", sorted(TOOLS))
def test_each_spec_places_its_purpose_ref_where_its_schema_has_it(tool):
    spec = TOOLS[tool]
    assert purpose_paths(spec.input_schema) == ([spec.purpose_ref] if spec.purpose_ref else [])


def test_only_a_mutation_is_destructive_or_confirmed():
    with pytest.raises(ValueError):
        ToolSpec(FLAG, "", FlagInput, FlagOutput, destructive=True)
    with pytest.raises(ValueError):
        ToolSpec(FLAG, "", FlagInput, FlagOutput, confirmation=SPEC.confirmation)
