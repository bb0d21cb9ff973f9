"""stdio: one scope bound at launch from the environment, both eras."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
from mcp import Client, StdioServerParameters
from mcp.shared.exceptions import MCPError
from mcp_support import MODES, claims, stdio_server, token

from engram.models.tools import CAPTURE, GET, SEARCH

pytestmark = pytest.mark.anyio
SCRIPT = str(Path(__file__).with_name("stdio_fake_server.py"))


def params(env: dict[str, str], data_dir: Path) -> StdioServerParameters:
    base = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG", "PYTHONPATH")}
    return StdioServerParameters(
        command=sys.executable, args=[SCRIPT], env={**base, **env, "FAKE_DATA_DIR": str(data_dir)}
    )


@pytest.mark.parametrize("mode", MODES)
async def test_stdio_claims_file(tmp_path, mode):
    ctx_file = tmp_path / "ctx.json"
    ctx_file.write_text(json.dumps(claims(tools=[SEARCH, CAPTURE])))
    async with Client(params({"ENGRAM_CONTEXT_FILE": str(ctx_file)}, tmp_path), mode=mode) as client:
        assert sorted(t.name for t in (await client.list_tools()).tools) == [CAPTURE, SEARCH]
        capture = {"idempotency_key": "k" * 16, "payload": {"purpose_ref": "purpose:test"}}
        result = await client.call_tool(CAPTURE, capture)
        assert result.structured_content["ok"] is True and not result.is_error
        with pytest.raises(MCPError) as info:
            await client.call_tool(SEARCH, {"query": "q", "purpose_ref": "other"})
        assert info.value.code == -32603
        with pytest.raises(MCPError) as info:
            await client.call_tool(GET, {"record_id": "mem_a", "purpose_ref": "purpose:test"})
        assert info.value.code == -32602
    assert (tmp_path / "audit.jsonl").read_text().count("\n") == 3


async def test_stdio_jwt_and_tenant_opt_in(tmp_path):
    async with Client(params({"ENGRAM_CONTEXT": token(tenant="globex")}, tmp_path), mode="auto") as client:
        with pytest.raises(MCPError) as info:
            await client.list_tools()
        assert info.value.code == -32603


@pytest.mark.parametrize("mode", MODES)
async def test_engram_serve_stdio_real_engine(tmp_path, mode):
    pytest.importorskip("engram.service.engine.engine")
    from typer.testing import CliRunner

    from engram.service.cli import app as cli_app

    data = tmp_path / "data"
    data.mkdir()
    assert CliRunner().invoke(cli_app, ["admin", "tenant", "enable", "acme", "-d", str(data)]).exit_code == 0
    ctx_file = tmp_path / "ctx.json"
    ctx_file.write_text(json.dumps(claims(tools=[SEARCH, GET])))
    server = stdio_server(data, ENGRAM_CONTEXT_FILE=str(ctx_file))
    async with Client(server, mode=mode) as client:
        assert sorted(t.name for t in (await client.list_tools()).tools) == [GET, SEARCH]
        result = await client.call_tool(SEARCH, {"query": "anything", "purpose_ref": "purpose:test"})
        assert result.structured_content["ok"] is True
        assert result.structured_content["output"]["value"]["records"] == []
        missing = await client.call_tool(GET, {"record_id": "mem_aaaa", "purpose_ref": "purpose:test"})
        assert missing.structured_content["error"]["code"] == "NOT_FOUND"
