"""Withdraw and forget ask the human through MCP elicitation (both eras, stdio and HTTP).

The SDK client answers the elicitation: accept (the call runs), decline, cancel, accept
without approving, too late (past the approval window), or a client that declares no
elicitation at all: each of the latter is `gate_failed`, as without elicitation.
"""

from __future__ import annotations

import contextlib
import json
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import factories
import httpx2
import pytest
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp_support import MODES, SECRET, Human, ServerThread, claims, stdio_server  # noqa: E402

from engram.models.host_token import HEADER, mint_token
from engram.models.tools import CAPTURE, FORGET, REQUEST_ADMISSION, WITHDRAW

PURPOSE = factories.PURPOSE
pytestmark = pytest.mark.anyio


def key(label: str) -> str:
    return f"{label}-{uuid.uuid4().hex}"


async def captured_candidate(client: Client) -> str:
    result = await client.call_tool(CAPTURE, factories.capture_args(f"Decision {uuid.uuid4().hex}."))
    assert result.structured_content["ok"], result.structured_content
    return result.structured_content["output"]["value"]["candidate_id"]


async def withdraw(client: Client, candidate: str) -> dict:
    args = {"candidate_id": candidate, "idempotency_key": key("wd"), "reason_ref": "reason:user"}
    return (await client.call_tool(WITHDRAW, args)).structured_content


def error_code(envelope: dict) -> str:
    assert envelope["ok"] is False, envelope
    return envelope["error"]["code"]


# --------------------------------------------------------------------------- HTTP


@pytest.fixture(scope="module")
def http_servers(tmp_path_factory):
    """One engine, two apps: the 300 s approval window, and a 1 s one for 'too late'."""
    from engram.service.engine.engine import Engine
    from engram.service.http.app import create_app
    from engram.service.settings import Settings

    data_dir = tmp_path_factory.mktemp("elicit-http")
    engine = Engine.open(data_dir, load_model=False)
    engine.operator.set_tenant_enabled("acme", True)
    normal = create_app(engine, Settings(data_dir=data_dir, rate=0), host_secret=SECRET)
    short = create_app(engine, Settings(data_dir=data_dir, rate=0, approval_ttl_s=1), host_secret=SECRET)
    with ServerThread(normal) as a, ServerThread(short) as b:
        yield a, b
    engine.close()


@contextlib.asynccontextmanager
async def http_client(url: str, mode: str, human: Human | None) -> AsyncIterator[Client]:
    token = mint_token(claims(purpose=PURPOSE), SECRET)
    async with httpx2.AsyncClient(headers={HEADER: token}, timeout=httpx2.Timeout(30.0)) as http:
        async with Client(
            streamable_http_client(url, http_client=http), mode=mode, elicitation_callback=human
        ) as client:
            yield client


@pytest.mark.parametrize("mode", MODES)
async def test_http_accept_runs_the_call_once(http_servers, mode):
    human = Human("accept")
    async with http_client(http_servers[0].url, mode, human) as client:
        candidate = await captured_candidate(client)
        done = await withdraw(client, candidate)
        assert done["ok"] is True, done
        assert len(human.questions) == 1 and candidate in human.questions[0]
        again = await withdraw(client, candidate)  # a new call asks again; the candidate is terminal now
        assert error_code(again) == "ALREADY_TERMINAL"


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(
    "human",
    [Human("decline"), Human("cancel"), Human("accept", approve=False)],
    ids=["decline", "cancel", "not-approved"],
)
async def test_http_refusals_are_gate_failed(http_servers, mode, human):
    async with http_client(http_servers[0].url, mode, human) as client:
        candidate = await captured_candidate(client)
        assert error_code(await withdraw(client, candidate)) == "gate_failed"
    assert human.questions


@pytest.mark.parametrize("mode", MODES)
async def test_http_too_late_and_no_elicitation(http_servers, mode):
    late = Human("accept", delay=2.5)
    async with http_client(http_servers[1].url, mode, late) as client:
        candidate = await captured_candidate(client)
        assert error_code(await withdraw(client, candidate)) == "gate_failed"
    assert late.questions
    async with http_client(http_servers[0].url, mode, None) as client:
        candidate = await captured_candidate(client)
        assert error_code(await withdraw(client, candidate)) == "gate_failed"


@pytest.mark.parametrize("mode", MODES)
async def test_http_forget_with_approval(http_servers, mode):
    human = Human("accept")
    async with http_client(http_servers[0].url, mode, human) as client:
        candidate = await captured_candidate(client)
        admitted = await client.call_tool(REQUEST_ADMISSION, {"candidate_id": candidate, "idempotency_key": key("adm")})
        record_id = admitted.structured_content["output"]["value"]["outcome"]["record_id"]
        forgot = await client.call_tool(
            FORGET, {"record_id": record_id, "idempotency_key": key("fg"), "reason_ref": "reason:user"}
        )
        assert forgot.structured_content["ok"] is True, forgot.structured_content
        assert record_id in human.questions[0]


# --------------------------------------------------------------------------- stdio


def launched(tmp_path: Path, **env: str) -> StdioServerParameters:
    """The stdio server on tmp_path/data (tenant "acme" opted in once), bound by a claims file."""
    data = tmp_path / "data"
    ctx = tmp_path / "ctx.json"
    if not ctx.exists():
        from typer.testing import CliRunner

        from engram.service.cli import app

        data.mkdir(exist_ok=True)
        assert CliRunner().invoke(app, ["admin", "tenant", "enable", "acme", "-d", str(data)]).exit_code == 0
        ctx.write_text(json.dumps(claims(purpose=PURPOSE)))
    return stdio_server(data, ENGRAM_CONTEXT_FILE=str(ctx), **env)


@pytest.mark.parametrize("mode", MODES)
async def test_stdio_accept_decline_cancel_late(tmp_path, mode):
    human = Human("accept")
    async with Client(launched(tmp_path), mode=mode, elicitation_callback=human) as client:
        for action, expected in (("accept", None), ("decline", "gate_failed"), ("cancel", "gate_failed")):
            human.action = action  # the same client, the human answering differently
            asked = len(human.questions)
            candidate = await captured_candidate(client)
            envelope = await withdraw(client, candidate)
            assert len(human.questions) == asked + 1
            if expected is None:
                assert envelope["ok"] is True, envelope
            else:
                assert error_code(envelope) == expected
    late = Human("accept", delay=2.5)
    async with Client(launched(tmp_path, ENGRAM_APPROVAL_TTL_S="1"), mode=mode, elicitation_callback=late) as client:
        candidate = await captured_candidate(client)
        assert error_code(await withdraw(client, candidate)) == "gate_failed"
    assert late.questions
    async with Client(launched(tmp_path), mode=mode) as client:
        candidate = await captured_candidate(client)
        assert error_code(await withdraw(client, candidate)) == "gate_failed"
