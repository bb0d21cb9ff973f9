"""What the MCP ecosystem picks engram up by: `server.json` for the official MCP
registry (checked against its published schema, vendored under tests/deploy/schemas/),
the README's `mcp-name:` marker that ties the PyPI package to that entry, and the Claude
Desktop extension bundle `bin/build-mcpb` makes, checked with the official
`@anthropic-ai/mcpb` CLI (installed by .ci/run; skipped only on a machine without npm)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest
from jsonschema import Draft7Validator

from engram.models.tools import TOOLS

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = Path(__file__).parent / "schemas" / "server.schema.json"
MCPB = ROOT / "node_modules" / ".bin" / "mcpb"
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def _server_json() -> dict:
    return json.loads((ROOT / "server.json").read_text())


def test_server_json_is_valid_for_the_mcp_registry():
    schema = json.loads(SCHEMA.read_text())
    document = _server_json()
    assert document["$schema"] == schema["$id"]
    errors = sorted(Draft7Validator(schema).iter_errors(document), key=str)
    assert not errors, [error.message for error in errors]
    # The schema bites: a name without its namespace is refused.
    assert list(Draft7Validator(schema).iter_errors({**document, "name": "engram"}))
    (package,) = document["packages"]
    assert package["identifier"] == PROJECT["name"]
    # Registry clients run a PyPI package as `uvx IDENTIFIER ARGS`: a command of that name.
    assert PROJECT["scripts"][package["identifier"]] == PROJECT["scripts"]["engram"]
    assert document["version"] == package["version"] == PROJECT["version"]


def test_readme_names_the_registry_entry():
    marker = re.search(r"mcp-name: (\S+)", (ROOT / "README.md").read_text())
    assert marker is not None and marker.group(1) == _server_json()["name"]


@pytest.mark.package
@pytest.mark.skipif(shutil.which("npm") is None, reason="no npm here for the official mcpb CLI (.ci/run installs both)")
def test_the_extension_bundle_passes_the_official_checks(tmp_path):
    assert MCPB.exists(), "npm install --no-save @anthropic-ai/mcpb@2.1.2 (as .ci/run does)"
    built = subprocess.run(
        [sys.executable, str(ROOT / "bin" / "build-mcpb"), "--out", str(tmp_path / "dist")],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert built.returncode == 0, built.stderr
    bundle = Path(built.stdout.strip().splitlines()[-1])
    assert bundle.name == f"engram-{PROJECT['version']}.mcpb"
    unpacked = tmp_path / "unpacked"
    done = subprocess.run([str(MCPB), "unpack", str(bundle), str(unpacked)], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    valid = subprocess.run([str(MCPB), "validate", str(unpacked / "manifest.json")], capture_output=True, text=True)
    assert valid.returncode == 0, valid.stdout + valid.stderr
    manifest = json.loads((unpacked / "manifest.json").read_text())
    assert manifest["version"] == PROJECT["version"]
    assert sorted(tool["name"] for tool in manifest["tools"]) == sorted(TOOLS)
    assert (unpacked / manifest["server"]["entry_point"]).is_file()
    wheel = re.search(r'path = "(wheels/[^"]+\.whl)"', (unpacked / "pyproject.toml").read_text())
    assert wheel is not None
    with zipfile.ZipFile(unpacked / wheel.group(1)) as built_wheel:
        assert "engram/service/cli/__init__.py" in built_wheel.namelist()
    # The validator bites: a manifest without its server is refused.
    broken = tmp_path / "broken"
    shutil.copytree(unpacked, broken)
    (broken / "manifest.json").write_text(json.dumps({k: v for k, v in manifest.items() if k != "server"}))
    refused = subprocess.run([str(MCPB), "validate", str(broken / "manifest.json")], capture_output=True, text=True)
    assert refused.returncode != 0
