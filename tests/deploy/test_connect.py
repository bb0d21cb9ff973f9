"""Stock MCP clients: `admin context init`, `connect CLIENT [--write]`, `admin context mint`."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import factories
import jwt
import pytest
from mcp import Client
from mcp_support import written_entry
from typer.testing import CliRunner

from engram.models.tools import CAPTURE, REQUEST_ADMISSION, SEARCH, TOOLS, WITHDRAW
from engram.service.cli import app
from engram.service.engine.gates import operation_digest
from engram.service.mcp.host_context import CONTEXT_FILE_ENV, load_host_secret

runner = CliRunner()


def _init(data: Path, *extra: str):
    result = runner.invoke(app, ["admin", "context", "init", "-d", str(data), *extra])
    assert result.exit_code == 0, result.output
    return result


def test_init_writes_a_private_long_lived_binding(tmp_path):
    data = tmp_path / "data"
    result = _init(data, "--principal", "ana")
    path = Path(result.stdout.strip().splitlines()[-1])
    assert path == (data / "contexts" / "local.json").resolve()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    claims = json.loads(path.read_text())
    assert claims["tenant"] == "local" and claims["principal"] == "ana"
    assert sorted(claims["tools"]) == sorted(TOOLS) and "exp" not in claims
    status = runner.invoke(app, ["admin", "tenant", "status", "local", "-d", str(data)])
    assert status.stdout.strip() == "enabled"
    # Idempotent: a second init keeps the file (and says so).
    again = _init(data, "--principal", "bob")
    assert "unchanged" in again.output and json.loads(path.read_text())["principal"] == "ana"
    bad = runner.invoke(app, ["admin", "context", "init", "-d", str(data), "--tool", "engram_memory_nope"])
    assert bad.exit_code == 2


def test_connect_prints_each_clients_entry(tmp_path):
    data = tmp_path / "data"
    runner.invoke(app, ["connect", "cursor", "-d", str(data)])
    missing = runner.invoke(app, ["connect", "cursor", "-d", str(data)])
    assert missing.exit_code == 2 and "context init" in missing.output
    _init(data)
    keys = {
        "claude-desktop": "mcpServers",
        "claude-code": "mcpServers",
        "cursor": "mcpServers",
        "vscode": "servers",
        "inspector": "mcpServers",
    }
    for client, key in keys.items():
        result = runner.invoke(app, ["connect", client, "-d", str(data)])
        assert result.exit_code == 0, result.output
        text = result.stdout.split("# or directly")[0]
        entry = json.loads(text)[key]["engram"]
        assert entry["args"][-4:] == ["serve", "--stdio", "--data-dir", str(data.resolve())]
        assert entry["env"] == {CONTEXT_FILE_ENV: str((data / "contexts" / "local.json").resolve())}
        assert ("type" in entry) == (client in ("claude-code", "vscode", "inspector"))
    assert runner.invoke(app, ["connect", "emacs", "-d", str(data)]).exit_code == 2


def test_connect_write_merges_and_keeps_other_servers(tmp_path):
    data = tmp_path / "data"
    _init(data)
    config = tmp_path / ".vscode" / "mcp.json"
    config.parent.mkdir()
    config.write_text(json.dumps({"servers": {"other": {"command": "x"}}, "inputs": []}))
    first = runner.invoke(app, ["connect", "vscode", "--write", "--config-path", str(config), "-d", str(data)])
    assert first.exit_code == 0 and "added" in first.stdout
    second = runner.invoke(app, ["connect", "vscode", "--write", "--config-path", str(config), "-d", str(data)])
    assert "updated" in second.stdout
    document = json.loads(config.read_text())
    assert document["servers"]["other"] == {"command": "x"} and document["inputs"] == []
    assert document["servers"]["engram"]["type"] == "stdio"
    broken = tmp_path / "broken.json"
    broken.write_text("{not json")
    refused = runner.invoke(app, ["connect", "cursor", "--write", "--config-path", str(broken), "-d", str(data)])
    assert refused.exit_code == 1 and broken.read_text() == "{not json"


@pytest.mark.anyio
async def test_written_entry_launches_a_working_server(tmp_path):
    """What a desktop client does: start the server from the config entry, capture, admit, search."""
    data = tmp_path / "data"
    _init(data, "--purpose", factories.PURPOSE)
    server = written_entry(data, tmp_path)
    async with Client(server) as client:
        assert sorted(t.name for t in (await client.list_tools()).tools) == sorted(TOOLS)
        captured = await client.call_tool(CAPTURE, factories.capture_args("Rotate the ingress certificates monthly."))
        candidate = captured.structured_content["output"]["value"]["candidate_id"]
        admitted = await client.call_tool(
            REQUEST_ADMISSION, {"candidate_id": candidate, "idempotency_key": factories.key("adm")}
        )
        assert admitted.structured_content["ok"] is True, admitted.structured_content
        found = await client.call_tool(SEARCH, {"query": "ingress certificates", "purpose_ref": factories.PURPOSE})
        assert len(found.structured_content["output"]["value"]["records"]) == 1


def test_mint_signs_the_local_context_and_a_bound_confirmation(tmp_path):
    data = tmp_path / "data"
    _init(data, "--principal", "ana")
    assert runner.invoke(app, ["admin", "host-secret", "-d", str(data)]).exit_code == 0
    secret = load_host_secret(data, environ={})
    plain = runner.invoke(app, ["admin", "context", "mint", "-d", str(data), "--ttl", "600"])
    assert plain.exit_code == 0, plain.output
    claims = jwt.decode(plain.stdout.strip(), secret, algorithms=["HS256"])
    assert claims["principal"] == "ana" and claims["exp"] - claims["iat"] == 600
    assert "confirmation" not in claims
    arguments = {"candidate_id": "cand_1", "idempotency_key": "k" * 16, "reason_ref": "r:1"}
    args_file = tmp_path / "args.json"
    args_file.write_text(json.dumps(arguments))
    confirmed = runner.invoke(
        app, ["admin", "context", "mint", "-d", str(data), "--confirm-tool", WITHDRAW, "--arguments", str(args_file)]
    )
    assert confirmed.exit_code == 0, confirmed.output
    conf = jwt.decode(confirmed.stdout.strip(), secret, algorithms=["HS256"])["confirmation"]
    assert conf["capability"] == WITHDRAW and conf["target"] == "cand_1"
    assert conf["operation_digest"] == operation_digest(WITHDRAW, arguments)
    assert conf["expires_at"] - conf["approved_at"] == 300_000
    no_target = runner.invoke(
        app, ["admin", "context", "mint", "-d", str(data), "--confirm-tool", SEARCH, "--arguments", str(args_file)]
    )
    assert no_target.exit_code == 2
