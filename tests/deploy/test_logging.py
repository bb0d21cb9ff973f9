"""Logging: refusal reasons behind -32603 reach the log, as JSON, without content."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from engram.models.tools import SEARCH

ROOT = Path(__file__).resolve().parents[2]
MARKER = "zebra-quartz-unique-word"


def _rpc(id_: int | None, method: str, params: dict) -> str:
    body: dict = {"jsonrpc": "2.0", "method": method, "params": params}
    if id_ is not None:
        body["id"] = id_
    return json.dumps(body) + "\n"


def test_refusal_reason_logged_without_content(tmp_path):
    data = tmp_path / "data"
    config = tmp_path / "engram.toml"
    config.write_text(f'data_dir = "{data}"\nlog_format = "json"\nlog_level = "info"\nload_model = false\n')
    ctx = tmp_path / "ctx.json"
    ctx.write_text(
        json.dumps(
            {
                "tenant": "acme",
                "workspace": "w",
                "principal": "p",
                "agent_id": "a",
                "session": "s",
                "purpose": "purpose:test",
                "tools": [SEARCH],
                "confirm": [],
            }
        )
    )
    env = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG")}
    env.update(PYTHONPATH=str(ROOT), ENGRAM_CONTEXT_FILE=str(ctx), ENGRAM_CONFIG=str(config))
    requests = "".join(
        [
            _rpc(
                1,
                "initialize",
                {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
            ),
            _rpc(None, "notifications/initialized", {}),
            _rpc(2, "tools/call", {"name": SEARCH, "arguments": {"query": MARKER, "purpose_ref": "purpose:test"}}),
        ]
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "engram.service.cli", "serve", "--stdio"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=ROOT,
    )
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(requests)
    proc.stdin.flush()
    answers = []
    while not any(a.get("id") == 2 for a in answers):  # stdin stays open until the answer came
        line = proc.stdout.readline()
        assert line, "server closed stdout"
        answers.append(json.loads(line))
    _, stderr = proc.communicate(timeout=120)
    assert any(a.get("id") == 2 and a.get("error", {}).get("code") == -32603 for a in answers), answers
    lines = [json.loads(line) for line in stderr.splitlines() if line.startswith("{")]
    refusals = [line for line in lines if line["logger"].startswith("engram") and "refused" in line["message"]]
    assert refusals and "tenant not enabled" in refusals[0]["message"], stderr
    assert refusals[0]["level"] == "info" and refusals[0]["time"].endswith("+00:00")
    assert MARKER not in stderr
    assert (data / "audit.jsonl").exists()  # the data directory came from the config file


def test_the_handler_follows_stderr_when_it_is_swapped_and_closed(monkeypatch, capsys):
    """A host (a test runner's capture) may swap stderr and close it later: log lines
    go to the stderr of the moment, never to a closed stream ("--- Logging error ---")."""
    import io
    import logging

    from engram.service.logs import SERVICE_LOGGERS, configure_logging
    from engram.service.settings import LogFormat, LogLevel

    root = logging.getLogger()
    saved = list(root.handlers)
    levels = {name: logging.getLogger(name).level for name in SERVICE_LOGGERS}
    try:
        swapped = io.StringIO()
        monkeypatch.setattr(sys, "stderr", swapped)
        configure_logging(LogLevel.INFO, LogFormat.TEXT)
        logging.getLogger("engram.test").info("while swapped")
        swapped.close()
        monkeypatch.undo()
        logging.getLogger("engram.test").info("after the swap")
        err = capsys.readouterr().err
        assert "after the swap" in err and "Logging error" not in err
    finally:
        for handler in list(root.handlers):
            root.removeHandler(handler)
        for handler in saved:
            root.addHandler(handler)
        for name, level in levels.items():
            logging.getLogger(name).setLevel(level)
