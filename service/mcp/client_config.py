"""Config entries that make stock MCP clients launch `engram serve --stdio`.

Why here: desktop MCP clients (Claude Desktop, Claude Code, Cursor, VS Code, the MCP
Inspector) each keep a JSON file of servers they launch over stdio, under slightly
different keys. `engram connect CLIENT` prints the entry, or merges it into that file
without disturbing the other servers there. The entry binds the local scope through
`ENGRAM_CONTEXT_FILE` (written by `engram admin context init`), so nothing expires.
"""

from __future__ import annotations

import json
import os
import platform
import tempfile
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

from engram.models.errors import EngramError

from .host_context import CONTEXT_FILE_ENV


class ConfigFileInvalid(EngramError):
    """The client's file exists but is not a JSON object; it is left untouched."""


class McpClient(StrEnum):
    CLAUDE_DESKTOP = "claude-desktop"
    CLAUDE_CODE = "claude-code"
    CURSOR = "cursor"
    VSCODE = "vscode"
    INSPECTOR = "inspector"


@dataclass(frozen=True)
class ClientFormat:
    """Where a client keeps its servers: the file, the top-level key, whether entries
    carry `"type": "stdio"`."""

    servers_key: str
    typed: bool
    path: Path


def _claude_desktop_path(home: Path) -> Path:
    system = platform.system()
    if system == "Darwin":
        return home / "Library" / "Application Support" / "Claude" / "claude_desktop_config.json"
    if system == "Windows":
        return Path(os.environ.get("APPDATA", home / "AppData" / "Roaming")) / "Claude" / "claude_desktop_config.json"
    return home / ".config" / "Claude" / "claude_desktop_config.json"


def client_format(client: McpClient, *, home: Path | None = None, cwd: Path | None = None) -> ClientFormat:
    """The config file each client reads (project files are relative to `cwd`)."""
    home = Path.home() if home is None else home
    cwd = Path.cwd() if cwd is None else cwd
    if client is McpClient.CLAUDE_DESKTOP:
        return ClientFormat("mcpServers", False, _claude_desktop_path(home))
    if client is McpClient.CLAUDE_CODE:
        return ClientFormat("mcpServers", True, cwd / ".mcp.json")
    if client is McpClient.CURSOR:
        return ClientFormat("mcpServers", False, home / ".cursor" / "mcp.json")
    if client is McpClient.VSCODE:
        return ClientFormat("servers", True, cwd / ".vscode" / "mcp.json")
    return ClientFormat("mcpServers", True, cwd / "mcp-inspector.json")


@dataclass(frozen=True)
class StdioLaunch:
    """How a client starts the server: a command, its arguments, its environment."""

    command: str
    args: list[str]
    env: dict[str, str]

    def entry(self, fmt: ClientFormat) -> dict[str, Any]:
        body: dict[str, Any] = {"command": self.command, "args": list(self.args), "env": dict(self.env)}
        return {"type": "stdio", **body} if fmt.typed else body


def stdio_launch(command: list[str], data_dir: Path, context_file: Path) -> StdioLaunch:
    """`<engram> serve --stdio --data-dir DATA` with the context file in its environment."""
    return StdioLaunch(
        command=command[0],
        args=[*command[1:], "serve", "--stdio", "--data-dir", str(data_dir.resolve())],
        env={CONTEXT_FILE_ENV: str(context_file.resolve())},
    )


def inspector_command(launch: StdioLaunch) -> list[str]:
    """The MCP Inspector's own command line for the same server."""
    env = [arg for name, value in launch.env.items() for arg in ("-e", f"{name}={value}")]
    return ["npx", "@modelcontextprotocol/inspector", *env, "--", launch.command, *launch.args]


def merge_entry(path: Path, fmt: ClientFormat, name: str, entry: dict[str, Any]) -> bool:
    """Set `servers[name] = entry` in the client's file, keeping everything else.

    Written atomically (temporary file, then rename) with the file's mode kept (0600
    for a new one). Returns whether an entry of that name was replaced.
    """
    document: dict[str, Any] = {}
    if path.exists():
        try:
            loaded = json.loads(path.read_text(encoding="utf-8") or "{}")
        except ValueError:
            raise ConfigFileInvalid(str(path)) from None
        if not isinstance(loaded, dict) or not isinstance(loaded.get(fmt.servers_key, {}), dict):
            raise ConfigFileInvalid(str(path))
        document = loaded
    servers = document.setdefault(fmt.servers_key, {})
    replaced = name in servers
    servers[name] = entry
    path.parent.mkdir(parents=True, exist_ok=True)
    mode = path.stat().st_mode & 0o777 if path.exists() else 0o600
    fd, tmp = tempfile.mkstemp(prefix=path.name + ".", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump(document, handle, indent=2)
            handle.write("\n")
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return replaced
