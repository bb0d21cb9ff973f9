"""The model's runtime files are made once per user, not per data directory: a second
data directory's first launch reuses the export, so do an ingest and a restore into new
directories, ONNX Runtime's own cache lives in engram's, and loading the model writes
no progress bar to a stdio server's stderr (its log says what it prepares)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from engram.service.cli import app

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.model, pytest.mark.slow]

HANDSHAKE = [
    {
        "jsonrpc": "2.0",
        "id": 0,
        "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}},
    },
    {"jsonrpc": "2.0", "method": "notifications/initialized"},
]


def _search(request_id: int) -> bytes:
    arguments = {"query": "anything", "purpose_ref": "purpose:local"}
    call = {"name": "engram_memory_search", "arguments": arguments}
    return json.dumps({"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": call}).encode() + b"\n"


def _launch(tmp_path: Path, name: str, cache: Path) -> str:
    """A stdio server on a new data directory, until it answered a search (the model
    loaded by then); its stderr."""
    data = tmp_path / name
    assert CliRunner().invoke(app, ["admin", "context", "init", "-d", str(data)]).exit_code == 0
    env = {
        **os.environ,
        "ENGRAM_CONTEXT_FILE": str(data / "contexts" / "local.json"),
        "ENGRAM_MODEL_CACHE_DIR": str(cache),
        "PYTHONPATH": str(ROOT),
        "HOME": str(tmp_path / "home"),
    }
    env.pop("XDG_CACHE_HOME", None)
    proc = subprocess.Popen(
        [sys.executable, "-m", "engram.service.cli", "serve", "--stdio", "-d", str(data)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(b"".join(json.dumps(r).encode() + b"\n" for r in HANDSHAKE))
    proc.stdin.write(_search(1))
    proc.stdin.flush()
    while True:
        line = proc.stdout.readline()
        assert line, "the server closed stdout"
        answer = json.loads(line)
        if "result" not in answer or answer.get("id") == 0:
            continue
        envelope = answer["result"]["structuredContent"]
        if envelope["ok"]:
            break
        # The model is still being prepared past the call's deadline: retriable, so retry.
        assert envelope["error"]["code"] == "DEADLINE_EXCEEDED", envelope
        proc.stdin.write(_search(answer["id"] + 1))
        proc.stdin.flush()
    _, stderr = proc.communicate(timeout=120)
    assert not (data / "models").exists()  # nothing derived from the installation per directory
    return stderr.decode()


def test_two_data_directories_share_one_model_export(tmp_path):
    cache = tmp_path / "cache"
    first = _launch(tmp_path, "one", cache)
    made = {path.name: path.stat().st_ino for path in cache.glob("*.onnx")}
    assert len(made) == 2  # the float32 export and its int8 copy
    assert "preparing the model's runtime files once" in first
    second = _launch(tmp_path, "two", cache)
    assert {path.name: path.stat().st_ino for path in cache.glob("*.onnx")} == made
    assert "preparing the model's runtime files" not in second
    # ONNX Runtime's own cache (the device id it writes, where it sees no CI
    # environment) goes to engram's cache, never to ~/.cache/Microsoft.
    assert not (tmp_path / "home" / ".cache" / "Microsoft").exists()
    for stderr in (first, second):
        assert "Loading weights" not in stderr and "\r" not in stderr, stderr
    # The other commands that load the model into a new directory use the same files.
    env = {**os.environ, "ENGRAM_MODEL_CACHE_DIR": str(cache), "HOME": str(tmp_path / "home"), "PYTHONPATH": str(ROOT)}
    env.pop("XDG_CACHE_HOME", None)
    ingested, backup, restored = tmp_path / "three", tmp_path / "backup", tmp_path / "restored"
    for command in (
        ["ingest", str(ROOT / "examples" / "ops-notes"), "--tenant", "acme", "--workspace", "kb", "-d", str(ingested)],
        ["admin", "backup", str(backup), "-d", str(ingested)],
        ["admin", "restore", str(backup), "-d", str(restored), "--keys", str(ingested / "keys")],
    ):
        done = subprocess.run(
            [sys.executable, "-m", "engram.service.cli", *command], env=env, capture_output=True, text=True, check=False
        )
        assert done.returncode == 0, done.stderr
        assert "preparing the model's runtime files" not in done.stderr
    assert not (ingested / "models").exists() and not (restored / "models").exists()
    assert {path.name: path.stat().st_ino for path in cache.glob("*.onnx")} == made
