"""The `engram` command line: fast help, host secret, tenant opt-in."""

from __future__ import annotations

import stat
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from engram.service.cli import app

runner = CliRunner()


def test_help_is_fast_and_imports_nothing_heavy():
    code = (
        "import sys, engram.service.cli;"
        "heavy = [m for m in ('torch', 'sentence_transformers', 'tantivy', 'usearch', 'hnswlib', 'uvicorn', 'mcp', "
        "'engram.service.engine.engine') if m in sys.modules];"
        "assert not heavy, heavy"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
    result = runner.invoke(app, ["--help"])
    assert result.exit_code == 0
    for command in ("serve", "admin"):
        assert command in result.output
    assert "--stdio" in runner.invoke(app, ["serve", "--help"]).output


def test_host_secret(tmp_path, monkeypatch):
    monkeypatch.delenv("ENGRAM_HOST_SECRET", raising=False)
    first = runner.invoke(app, ["admin", "host-secret", "--data-dir", str(tmp_path)])
    assert first.exit_code == 0
    path = tmp_path / "host_secret"
    assert str(path.resolve()) in first.output
    secret = path.read_text().strip()
    assert secret not in first.output
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    shown = runner.invoke(app, ["admin", "host-secret", "--data-dir", str(tmp_path), "--show"])
    assert shown.exit_code == 0 and secret in shown.output
    assert path.read_text().strip() == secret  # never overwritten


def test_serve_refuses_a_host_secret_others_can_read(tmp_path, monkeypatch):
    monkeypatch.delenv("ENGRAM_HOST_SECRET", raising=False)
    secret = tmp_path / "host_secret"
    secret.write_text("ab" * 32 + "\n")
    secret.chmod(0o644)
    result = runner.invoke(app, ["serve", "--data-dir", str(tmp_path), "--no-model"])
    assert result.exit_code == 2


def test_serve_refuses_a_seed_that_is_not_one(tmp_path, monkeypatch):
    monkeypatch.delenv("ENGRAM_HOST_SECRET", raising=False)
    (tmp_path / "not-a-seed").mkdir()
    for seed in (tmp_path / "missing", tmp_path / "not-a-seed"):
        result = runner.invoke(
            app, ["serve", "--data-dir", str(tmp_path / "data"), "--no-model", "--seed-vectors", str(seed)]
        )
        assert result.exit_code == 2
        assert "is not a seed written by `engram admin export-vectors`" in result.output
    monkeypatch.setenv("ENGRAM_SEED_VECTORS", str(tmp_path / "missing"))
    assert runner.invoke(app, ["serve", "--data-dir", str(tmp_path / "data"), "--no-model"]).exit_code == 2


def test_admin_export_vectors_refuses_an_existing_directory(tmp_path):
    (tmp_path / "out").mkdir()
    result = runner.invoke(app, ["admin", "export-vectors", str(tmp_path / "out"), "-d", str(tmp_path)])
    assert result.exit_code == 2 and "exists" in result.output


def test_tenant_enable_disable(tmp_path):
    pytest.importorskip("engram.service.engine.engine")
    data = str(tmp_path)
    assert runner.invoke(app, ["admin", "tenant", "status", "acme", "-d", data]).output.strip() == "disabled"
    assert runner.invoke(app, ["admin", "tenant", "enable", "acme", "-d", data]).exit_code == 0
    assert runner.invoke(app, ["admin", "tenant", "status", "acme", "-d", data]).output.strip() == "enabled"
    assert runner.invoke(app, ["admin", "tenant", "disable", "acme", "-d", data]).exit_code == 0
    assert runner.invoke(app, ["admin", "tenant", "status", "acme", "-d", data]).output.strip() == "disabled"


def test_operator_commands(tmp_path):
    pytest.importorskip("engram.service.engine.engine")
    data = str(tmp_path / "data")
    (tmp_path / "data").mkdir()
    assert runner.invoke(app, ["admin", "tenant", "enable", "acme", "-d", data]).exit_code == 0
    verify = runner.invoke(app, ["admin", "verify-journal", "-d", data])
    assert verify.exit_code == 0, verify.output
    assert runner.invoke(app, ["admin", "rotate-kek", "-d", data]).exit_code == 0
    backup_dir = tmp_path / "backup"
    assert runner.invoke(app, ["admin", "backup", str(backup_dir), "-d", data]).exit_code == 0
    restored = tmp_path / "restored"
    keyless = runner.invoke(app, ["admin", "restore", str(backup_dir), "-d", str(restored), "--no-model"])
    assert keyless.exit_code == 2 and "no key-encryption keys" in keyless.output
    keys = ["--keys", str(tmp_path / "data" / "keys")]
    result = runner.invoke(app, ["admin", "restore", str(backup_dir), "-d", str(restored), "--no-model", *keys])
    assert result.exit_code == 0, result.output
    refused = runner.invoke(app, ["admin", "restore", str(backup_dir), "-d", str(restored), "--no-model", *keys])
    assert refused.exit_code == 1 and "RESTORE_REFUSED" in refused.output
    assert runner.invoke(app, ["admin", "tenant", "status", "acme", "-d", str(restored)]).output.strip() == "enabled"
    assert runner.invoke(app, ["admin", "history", "acme", "ws1", "mem_x", "-d", data]).output.strip() == "[]"
    assert runner.invoke(app, ["admin", "sweep-invalidations", "-d", data]).exit_code == 0
    assert runner.invoke(app, ["admin", "rebuild-projections", "-d", data, "--no-model"]).exit_code == 0


@pytest.mark.anyio
async def test_engram_serve_http_subprocess(tmp_path):
    pytest.importorskip("engram.service.engine.engine")
    import os
    import time
    from pathlib import Path

    import httpx
    from mcp_support import connect, free_port, token

    root = Path(__file__).resolve().parents[2]
    data = tmp_path / "data"
    data.mkdir()
    assert runner.invoke(app, ["admin", "tenant", "enable", "acme", "-d", str(data)]).exit_code == 0
    assert not (data / "host_secret").exists()  # a fresh data dir: serve creates it
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(root)}
    env.pop("ENGRAM_HOST_SECRET", None)
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "engram.service.cli",
            "serve",
            "--no-model",
            "--port",
            str(port),
            "-d",
            str(data),
            "--log-level",
            "warning",
        ],
        cwd=root,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(base + "/healthz").status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline and proc.poll() is None
            time.sleep(0.1)
        assert (data / "host_secret").stat().st_mode & 0o777 == 0o600
        secret = (data / "host_secret").read_text().strip().encode()
        async with connect(base + "/mcp", token(secret=secret, tools=["engram_memory_search"]), "auto") as client:
            assert [t.name for t in (await client.list_tools()).tools] == ["engram_memory_search"]
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_keyless_backup_export_kek_and_restore(tmp_path):
    pytest.importorskip("engram.service.engine.engine")
    data = str(tmp_path / "data")
    (tmp_path / "data").mkdir()
    assert runner.invoke(app, ["admin", "tenant", "enable", "acme", "-d", data]).exit_code == 0
    assert runner.invoke(app, ["admin", "backup", str(tmp_path / "b1"), "-d", data]).exit_code == 0
    assert not (tmp_path / "b1" / "keys").exists()
    with_keys = runner.invoke(app, ["admin", "backup", str(tmp_path / "b2"), "-d", data, "--include-keys"])
    assert with_keys.exit_code == 0 and "warning" in with_keys.output
    assert list((tmp_path / "b2" / "keys").glob("kek-*.key"))
    exported = runner.invoke(app, ["admin", "export-kek", str(tmp_path / "kek-copy"), "-d", data])
    assert exported.exit_code == 0 and "warning" in exported.output
    assert stat.S_IMODE((tmp_path / "kek-copy").stat().st_mode) == 0o700
    restored = runner.invoke(
        app,
        [
            "admin",
            "restore",
            str(tmp_path / "b1"),
            "-d",
            str(tmp_path / "r1"),
            "--no-model",
            "--keys",
            str(tmp_path / "kek-copy"),
        ],
    )
    assert restored.exit_code == 0, restored.output
    assert (
        runner.invoke(app, ["admin", "tenant", "status", "acme", "-d", str(tmp_path / "r1")]).output.strip()
        == "enabled"
    )
    from_own_keys = runner.invoke(
        app, ["admin", "restore", str(tmp_path / "b2"), "-d", str(tmp_path / "r2"), "--no-model"]
    )
    assert from_own_keys.exit_code == 0, from_own_keys.output


def test_the_server_freezes_what_warm_up_loaded_out_of_the_collectors_reach_once_ready():
    """A full collection walking the loaded model and index maps paused every thread of
    the server for 50 to 100 ms; `engram serve` freezes them once warm-up is done, not
    before (what a warm-up still loads would otherwise stay walkable)."""
    import gc
    import threading
    import time

    from engram.service.cli.serve import _collect_less_once_ready

    class Warming:
        def __init__(self) -> None:
            self.ready = threading.Event()

        def wait_ready(self, timeout: float | None = None) -> bool:
            return self.ready.wait(timeout)

    gc.unfreeze()
    engine = Warming()
    try:
        _collect_less_once_ready(engine)
        time.sleep(0.2)
        assert gc.get_freeze_count() == 0  # still warming up: nothing frozen yet
        engine.ready.set()
        deadline = time.monotonic() + 10
        while gc.get_freeze_count() == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert gc.get_freeze_count() > 0
    finally:
        engine.ready.set()
        gc.unfreeze()


def test_commands_that_read_a_data_directory_refuse_one_that_does_not_exist(tmp_path, monkeypatch):
    """A mistyped --data-dir is refused (exit 2, named), never taken for a new, empty
    store; and a database URL without -d does not create the default data directory."""
    work, share = tmp_path / "work", tmp_path / "share"
    work.mkdir()
    monkeypatch.chdir(work)
    monkeypatch.delenv("ENGRAM_DATA_DIR", raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(share))
    for command in (
        ["admin", "tenant", "status", "acme", "-d", "nope"],
        ["admin", "backup", "out", "-d", "nope"],
        ["admin", "verify-journal", "-d", "nope"],
        ["admin", "--database-url", "postgresql://engram@db.invalid/engram", "route", "list"],
    ):
        result = runner.invoke(app, command)
        named = "nope" if "-d" in command else str(share / "engram")
        assert result.exit_code == 2, (command, result.output)
        assert f"data directory {named} does not exist" in result.output
    assert sorted(p.name for p in work.iterdir()) == [] and not share.exists()


def test_commands_that_create_a_data_directory_say_so(tmp_path, monkeypatch):
    monkeypatch.delenv("ENGRAM_HOST_SECRET", raising=False)
    fresh = tmp_path / "fresh"
    made = runner.invoke(app, ["admin", "host-secret", "-d", str(fresh)])
    assert made.exit_code == 0 and f"creating data directory {fresh}" in made.output
    again = runner.invoke(app, ["admin", "host-secret", "-d", str(fresh)])
    assert again.exit_code == 0 and "creating" not in again.output


def test_option_help_is_readable_at_80_columns_and_flags_show_no_type():
    shown = runner.invoke(app, ["ingest", "--help"], env={"COLUMNS": "80"}, terminal_width=80)
    assert shown.exit_code == 0
    lines = shown.output.splitlines()
    assert max(len(line) for line in lines) <= 80
    assert any("--batch-size" in line and "Records per store transaction" in line for line in lines)
    assert "<bool>" not in shown.output and "COMMAND" not in shown.output
    admin_help = runner.invoke(app, ["admin", "tenant", "enable", "--help"], env={"COLUMNS": "80"})
    assert "<bool>" not in admin_help.output and "--help" in admin_help.output


def test_a_restore_after_a_rotation_names_the_missing_kek_and_leaves_nothing(tmp_path):
    """The backup's KEK was retired by a rotation: the error names it and points at
    export-kek; nothing is left behind, so the retry says the same, not "not empty"."""
    data = tmp_path / "data"
    (tmp_path / "r.jsonl").write_text('{"id": "r1", "text": "A record sealed under the first KEK."}\n')
    loaded = runner.invoke(app, ["ingest", str(tmp_path / "r.jsonl"), "-d", str(data), "--no-model", "--no-progress"])
    assert loaded.exit_code == 0, loaded.output
    assert runner.invoke(app, ["admin", "backup", str(tmp_path / "b"), "-d", str(data)]).exit_code == 0
    old_kek = next((data / "keys").glob("kek-*.key")).stem
    assert runner.invoke(app, ["admin", "rotate-kek", "-d", str(data)]).exit_code == 0
    assert not (data / "keys" / f"{old_kek}.key").exists()
    restore = ["admin", "restore", str(tmp_path / "b"), "-d", str(tmp_path / "r"), "--no-model"]
    for _ in range(2):
        failed = runner.invoke(app, [*restore, "--keys", str(data / "keys")])
        assert failed.exit_code == 1
        assert "BACKUP_INVALID" in failed.output and old_kek in failed.output and "export-kek" in failed.output
        assert not (tmp_path / "r").exists()


def test_a_restore_into_a_directory_in_use_says_why(tmp_path):
    (tmp_path / "r").mkdir()
    (tmp_path / "r" / "notes.txt").write_text("mine")
    data = tmp_path / "data"
    data.mkdir()
    assert (
        runner.invoke(app, ["admin", "backup", str(tmp_path / "b"), "-d", str(data), "--include-keys"]).exit_code == 0
    )
    refused = runner.invoke(app, ["admin", "restore", str(tmp_path / "b"), "-d", str(tmp_path / "r"), "--no-model"])
    assert refused.exit_code == 1 and "RESTORE_REFUSED" in refused.output
    assert "is not empty (it holds notes.txt)" in refused.output and "new directory" in refused.output
    assert (tmp_path / "r" / "notes.txt").read_text() == "mine"


def test_backup_files_are_the_owners_and_a_restore_says_what_it_does(tmp_path, monkeypatch):
    monkeypatch.delenv("ENGRAM_HOST_SECRET", raising=False)
    data = tmp_path / "data"
    data.mkdir()
    assert runner.invoke(app, ["admin", "tenant", "enable", "acme", "-d", str(data)]).exit_code == 0
    backup = tmp_path / "b"
    assert runner.invoke(app, ["admin", "backup", str(backup), "-d", str(data), "--include-keys"]).exit_code == 0
    modes = {p.relative_to(backup).as_posix(): stat.S_IMODE(p.stat().st_mode) for p in [backup, *backup.rglob("*")]}
    assert "engram.db" in modes
    assert {m for p, m in modes.items() if (backup / p).is_dir()} == {0o700}
    assert {m for p, m in modes.items() if (backup / p).is_file()} == {0o600}
    restored = runner.invoke(app, ["admin", "restore", str(backup), "-d", str(tmp_path / "r"), "--no-model"])
    assert restored.exit_code == 0, restored.output
    assert f"creating data directory {tmp_path / 'r'}" in restored.output
    assert f"restoring {backup} into {tmp_path / 'r'}: done in" in restored.output
    assert "no host secret" in restored.output and "stop working" in restored.output


def test_the_first_start_says_what_it_does(tmp_path):
    """`engram serve` on a new data directory says it creates it, what the warm-up does,
    and when it is ready (log lines on stderr)."""
    import os
    import threading
    from pathlib import Path

    from mcp_support import free_port

    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    env.pop("ENGRAM_HOST_SECRET", None)
    data = tmp_path / "data"
    command = ["serve", "--no-model", "--port", str(free_port()), "-d", str(data)]
    proc = subprocess.Popen(
        [sys.executable, "-m", "engram.service.cli", *command], stderr=subprocess.PIPE, text=True, env=env
    )
    guard = threading.Timer(120, proc.kill)  # a server that never gets ready ends the read below
    guard.start()
    said: list[str] = []
    try:
        assert proc.stderr is not None
        for line in proc.stderr:
            said.append(line)
            if "ready in" in line:
                break
    finally:
        guard.cancel()
        proc.terminate()
        proc.wait(timeout=30)
    text = "".join(said)
    assert f"creating data directory {data}" in text
    assert f"warming up {data}: bring every scope's indexes up to the journal" in text
    assert text.index("warming up") < text.index("ready in")


def test_stdio_refuses_a_console_or_workers_before_making_the_data_directory(tmp_path, monkeypatch):
    monkeypatch.delenv("ENGRAM_HOST_SECRET", raising=False)
    data = tmp_path / "data"
    shared = ["--workers", "2", "--database-url", "postgresql://127.0.0.1:9/none"]
    for extra, said in ((["--console-port", "8765"], "--stdio serves no console"), (shared, "--stdio is one process")):
        result = runner.invoke(app, ["serve", "--stdio", "--data-dir", str(data), "--no-model", *extra])
        assert result.exit_code == 2 and said in result.output
        assert not data.exists()
