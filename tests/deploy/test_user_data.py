"""Where a desktop user's memory lives: the user's data directory by default, and never
in a git project's status (keys, store and contexts), with owner-only modes."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _fresh_home(tmp_path: Path) -> dict[str, str]:
    home = tmp_path / "home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ENGRAM_", "XDG_"))}
    return {**env, "HOME": str(home), "PYTHONPATH": str(ROOT)}


def _engram(args: list[str], env: dict[str, str], cwd: Path) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "engram.service.cli", *args], env=env, cwd=cwd, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def _git_project(tmp_path: Path, env: dict[str, str]) -> Path:
    project = tmp_path / "project"
    project.mkdir()
    subprocess.run(["git", "init", "-q"], cwd=project, env=env, check=True)
    (project / "main.py").write_text("print('hello')\n")
    return project


def _porcelain(project: Path, env: dict[str, str]) -> list[str]:
    done = subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=all"], cwd=project, env=env, capture_output=True, text=True
    )
    return sorted(line[3:] for line in done.stdout.splitlines())


def _assert_private(data: Path) -> None:
    keys = list((data / "keys").iterdir())
    assert keys, "no key file written"
    for path in [data, data / "keys", data / "contexts"]:
        assert stat.S_IMODE(path.stat().st_mode) == 0o700, path
    for path in [*keys, data / "contexts" / "local.json"]:
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="checks the Linux user data directory")
def test_connect_in_a_git_project_keeps_the_memory_in_the_users_data_directory(tmp_path):
    env = _fresh_home(tmp_path)
    project = _git_project(tmp_path, env)
    printed = _engram(["admin", "context", "init"], env, project)
    data = Path(env["HOME"]) / ".local" / "share" / "engram"
    assert Path(printed.strip().splitlines()[-1]) == data / "contexts" / "local.json"
    _engram(["connect", "claude-code", "--write"], env, project)
    entry = json.loads((project / ".mcp.json").read_text())["mcpServers"]["engram"]
    assert entry["args"][-2:] == ["--data-dir", str(data)]
    assert _porcelain(project, env) == [".mcp.json", "main.py"]
    _assert_private(data)


def test_a_data_directory_inside_a_git_project_ignores_itself(tmp_path):
    env = _fresh_home(tmp_path)
    project = _git_project(tmp_path, env)
    _engram(["admin", "context", "init", "-d", "data"], env, project)
    _engram(["connect", "claude-code", "--write", "-d", "data"], env, project)
    data = project / "data"
    assert (data / "engram.db").exists() and (data / "contexts" / "local.json").exists()
    assert _porcelain(project, env) == [".mcp.json", "main.py"]
    _assert_private(data)
    # Outside any work tree no ignore file is written.
    _engram(["admin", "context", "init", "-d", str(tmp_path / "plain")], env, tmp_path)
    assert not (tmp_path / "plain" / ".gitignore").exists()
