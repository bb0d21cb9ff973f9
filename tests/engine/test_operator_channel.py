"""One owner per data directory: a server holds it, admin commands run through the
server's owner-only operator socket (never MCP), and are refused, not run as a second
engine, when the owner does not answer."""

from __future__ import annotations

import json
import os
import signal
import socket
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
from engine_support import accept, context, get, open_engine
from typer.testing import CliRunner

from engram.service.cli import app
from engram.service.operator.channel import OperatorChannel, OperatorFailure, call, socket_path
from engram.service.operator.ownership import DataDirLock, DirectoryHeld, is_held

runner = CliRunner()
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def live(data_dir):
    """An engine that owns data_dir with its operator channel up, as `engram serve` runs it."""
    lock = DataDirLock(data_dir).acquire()
    engine = open_engine(data_dir)
    channel = OperatorChannel(engine, data_dir).start()
    yield engine
    channel.close()
    engine.close()
    lock.release()


def test_the_socket_is_owner_only(live, data_dir) -> None:
    path = socket_path(data_dir)
    assert stat.S_ISSOCK(path.stat().st_mode)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_admin_commands_run_in_the_live_server(live, data_dir) -> None:
    ctx = context()
    rid = accept(live, ctx, "A record sealed under the first KEK.")
    before = live.deps.vault.ring.active_id
    result = runner.invoke(app, ["admin", "rotate-kek", "-d", str(data_dir)])
    assert result.exit_code == 0, result.output
    new_id = next(line for line in result.output.splitlines() if line.startswith("kek-"))
    assert new_id != before and live.deps.vault.ring.active_id == new_id  # active in the server at once
    assert get(live, ctx, rid)["record"]["record_id"] == rid
    after = accept(live, ctx, "A record the server admits after the rotation.")
    assert {kek for _, _, kek in live.deps.store.all_wrapped_keys()} == {new_id}
    assert [p.name for p in (data_dir / "keys").glob("kek-*.key")] == [f"{new_id}.key"]
    out = runner.invoke(app, ["admin", "tenant", "enable", "acme", "-d", str(data_dir)])
    assert out.exit_code == 0 and live.tenant_enabled("acme")
    assert runner.invoke(app, ["admin", "verify-journal", "-d", str(data_dir)]).exit_code == 0
    assert get(live, ctx, after)["record"]["record_id"] == after


def test_a_failing_command_reports_its_code(live, data_dir) -> None:
    with pytest.raises(OperatorFailure) as err:
        call(
            data_dir,
            "transition",
            {
                "operation": "dispute",
                "tenant": "acme",
                "workspace": "main",
                "record_id": "mem_nothere",
                "reason_ref": "ticket:1",
            },
        )
    assert err.value.code == "NOT_FOUND"
    with pytest.raises(OperatorFailure) as err:
        call(data_dir, "drop-everything", {})
    assert err.value.code == "UNKNOWN_COMMAND"
    out = runner.invoke(app, ["admin", "transition", "dispute", "acme", "main", "mem_nothere", "-d", str(data_dir)])
    assert out.exit_code == 1 and "NOT_FOUND" in out.output


def test_a_held_directory_without_a_channel_is_refused(data_dir) -> None:
    with DataDirLock(data_dir):
        assert is_held(data_dir)
        with pytest.raises(DirectoryHeld):
            DataDirLock(data_dir).acquire()
        out = runner.invoke(app, ["admin", "rotate-kek", "-d", str(data_dir)])
        assert out.exit_code == 1 and "holds" in out.output
        assert not (data_dir / "keys").exists() or len(list((data_dir / "keys").glob("kek-*.key"))) <= 1
    assert not is_held(data_dir)


def test_a_stranger_on_the_socket_gets_nothing_without_a_request(live, data_dir) -> None:
    """The channel answers one JSON line per connection; garbage is refused, not run."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(str(socket_path(data_dir)))
    sock.sendall(b"not json\n")
    reply = sock.makefile("rb").readline()
    sock.close()
    assert b"UNKNOWN_COMMAND" in reply


def _serve(data_dir: Path) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("ENGRAM_HOST_SECRET", None)
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "engram.service.cli",
            "serve",
            "--no-model",
            "--port",
            "0",
            "-d",
            str(data_dir),
            "--log-level",
            "warning",
        ],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )


def _wait_for_socket(proc: subprocess.Popen, data_dir: Path) -> None:
    deadline = time.monotonic() + 60
    while not socket_path(data_dir).exists():
        assert proc.poll() is None, proc.stderr.read().decode() if proc.stderr else ""
        assert time.monotonic() < deadline
        time.sleep(0.1)


@pytest.mark.sqlite_only("`engram serve` here runs on the data directory's SQLite store")
def test_rotate_beside_a_live_server_then_kill_and_restart(data_dir) -> None:
    """The issue's scenario: rotate-kek while `engram serve` runs, then kill -9: every
    record stays readable after the restart, and a second server is refused."""
    engine = open_engine(data_dir)
    ctx = context()
    rids = [accept(engine, ctx, f"Record {i} from before the server started.") for i in range(3)]
    engine.close()
    proc = _serve(data_dir)
    try:
        _wait_for_socket(proc, data_dir)
        second = _serve(data_dir)
        assert second.wait(timeout=60) == 1  # a held directory exits 1, as for every command
        assert b"holds" in second.stderr.read()
        out = runner.invoke(app, ["admin", "rotate-kek", "-d", str(data_dir)])
        assert out.exit_code == 0, out.output
        out = runner.invoke(app, ["admin", "transition", "dispute", "acme", "main", rids[0], "-d", str(data_dir)])
        assert out.exit_code == 0 and out.output.strip() == "accepted_disputed"
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
    assert not is_held(data_dir)  # the kernel released the lock with the process
    again = open_engine(data_dir)
    try:
        for rid in rids[1:]:
            assert get(again, ctx, rid)["record"]["record_id"] == rid
        with again.deps.store.reader() as tx:
            assert tx.record(ctx.scope, rids[0]).state == "accepted_disputed"
    finally:
        again.close()


def test_export_beside_a_live_server_is_written_by_the_server(live, data_dir, tmp_path) -> None:
    ctx = context()
    rid = accept(live, ctx, "A record exported while the server runs.")
    out = tmp_path / "export" / "scope.jsonl"
    result = runner.invoke(app, ["admin", "export", ctx.tenant, ctx.workspace, str(out), "-d", str(data_dir)])
    assert result.exit_code == 0, result.output
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert [line["id"] for line in lines] == [rid]
    assert lines[0]["text"] == "A record exported while the server runs."
    assert stat.S_IMODE(out.stat().st_mode) == 0o600
    assert is_held(data_dir)  # the server still owns the directory: no second engine was opened


def test_export_of_a_missing_directory_is_refused(tmp_path) -> None:
    missing = tmp_path / "nothing-here"
    result = runner.invoke(app, ["admin", "export", "acme", "main", str(tmp_path / "o.jsonl"), "-d", str(missing)])
    assert result.exit_code == 2 and f"data directory {missing} does not exist" in result.output
    assert not missing.exists()


def test_a_database_url_beside_a_server_on_another_store_is_refused_naming_both(live, data_dir, monkeypatch) -> None:
    """ENGRAM_DATABASE_URL exported while the server holding the data directory serves
    another store: refused (exit 2) with both named, the password left out, and
    nothing done on either store."""
    monkeypatch.setenv("ENGRAM_DATABASE_URL", "postgresql://engram:s3cret@db.invalid/engram")
    out = runner.invoke(app, ["admin", "tenant", "enable", "acme", "-d", str(data_dir)])
    assert out.exit_code == 2, out.output
    assert "ambiguous store" in out.output and "postgresql://engram@db.invalid/engram" in out.output
    assert "s3cret" not in out.output
    served = live.writer_spec().store.shared_url
    assert (str(data_dir / "engram.db") if served is None else served.split("@")[-1]) in out.output
    assert not live.tenant_enabled("acme")


def test_the_channel_refuses_a_request_for_another_store(live, data_dir) -> None:
    with pytest.raises(OperatorFailure) as err:
        call(data_dir, "tenant-set", {"tenant": "acme", "enabled": True}, store="postgresql://x@db.invalid/other")
    assert err.value.code == "STORE_MISMATCH"
    assert not live.tenant_enabled("acme")
    assert call(data_dir, "tenant-status", {"tenant": "acme"}, store=live.writer_spec().store.shared_url) == "disabled"
