"""Settings: one object, flags over ENGRAM_* over the config file over defaults."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError
from typer.testing import CliRunner

from engram.service.cli import app
from engram.service.settings import ConfigFileMissing, LogFormat, Settings, load_settings


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch):
    for name in (
        "ENGRAM_CONFIG",
        "ENGRAM_DATA_DIR",
        "ENGRAM_RATE",
        "ENGRAM_BURST",
        "ENGRAM_LOG_FORMAT",
        "ENGRAM_ALLOWED_HOSTS",
        "ENGRAM_PORT",
    ):
        monkeypatch.delenv(name, raising=False)


def test_defaults_are_declared_once():
    settings = load_settings()
    assert settings == Settings()
    assert (settings.rate, settings.burst, settings.deadline_ms, settings.port) == (20.0, 40, 30_000, 8765)
    assert settings.log_format is LogFormat.TEXT


def test_layering_flag_over_env_over_file(tmp_path, monkeypatch):
    config = tmp_path / "engram.toml"
    config.write_text('rate = 5.0\nburst = 7\nport = 9000\nlog_format = "json"\ndata_dir = "/srv/engram"\n')
    from_file = load_settings(config)
    assert (from_file.rate, from_file.burst, from_file.port) == (5.0, 7, 9000)
    assert from_file.log_format is LogFormat.JSON and from_file.data_dir == Path("/srv/engram")

    monkeypatch.setenv("ENGRAM_RATE", "3")
    monkeypatch.setenv("ENGRAM_ALLOWED_HOSTS", '["memory.internal:8765"]')
    from_env = load_settings(config)
    assert from_env.rate == 3.0 and from_env.burst == 7
    assert from_env.allowed_hosts == ["memory.internal:8765"]

    flagged = load_settings(config, rate=1.5, burst=None)  # None: the flag was not given
    assert flagged.rate == 1.5 and flagged.burst == 7

    monkeypatch.setenv("ENGRAM_CONFIG", str(config))
    assert load_settings().port == 9000


def test_bad_configuration_is_refused(tmp_path):
    config = tmp_path / "engram.toml"
    config.write_text("rat = 5.0\n")  # a typo must not be ignored
    with pytest.raises(ValidationError):
        load_settings(config)
    with pytest.raises(ConfigFileMissing):
        load_settings(tmp_path / "absent.toml")
    with pytest.raises(ValidationError):
        load_settings(rate=-1.0)
    with pytest.raises(ValidationError):
        load_settings(deadline_ms=600_001)


def test_cli_exits_2_on_bad_configuration(tmp_path):
    runner = CliRunner()
    missing = runner.invoke(app, ["serve", "--config", str(tmp_path / "absent.toml"), "-d", str(tmp_path)])
    assert missing.exit_code == 2 and "not found" in missing.output
    bad = runner.invoke(app, ["serve", "--burst", "0", "-d", str(tmp_path)])
    assert bad.exit_code == 2 and "burst" in bad.output
    too_long = runner.invoke(app, ["serve", "--approval-ttl-s", "301", "-d", str(tmp_path)])
    assert too_long.exit_code == 2 and "approval_ttl_s" in too_long.output


def test_admin_commands_read_the_data_dir_from_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("ENGRAM_DATA_DIR", str(tmp_path / "d"))
    (tmp_path / "d").mkdir()
    result = CliRunner().invoke(app, ["admin", "tenant", "enable", "acme"])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "d" / "engram.db").exists()
