"""The generated reference pages match the code, and the CLI page documents every command.

docs/reference/error-codes.md, configuration.md and cli.md hold blocks generated from
models/codes.py, the `Settings` class and the typer app; `bin/gen-docs` writes them. A
command, option, setting or code added without regenerating fails here.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import re
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import typer

from engram.models.codes import ErrorCode
from engram.service.cli import app
from engram.service.settings import ENV_PREFIX, Settings

ROOT = Path(__file__).resolve().parents[2]
REGENERATE = "stale: run `.venv/bin/python bin/gen-docs` and commit the pages"


def _gen_docs() -> ModuleType:
    path = ROOT / "bin" / "gen-docs"
    loader = importlib.machinery.SourceFileLoader("gen_docs", str(path))
    spec = importlib.util.spec_from_loader("gen_docs", loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


GEN = _gen_docs()
BLOCKS = [(page, name) for page, blocks in GEN.BLOCKS.items() for name in blocks]


def _block(page: str, name: str) -> str:
    match = GEN.block_pattern(name).search((ROOT / page).read_text(encoding="utf-8"))
    assert match is not None, f"{page} lost the markers of block {name!r}"
    return match.group(2)


@pytest.mark.parametrize(("page", "name"), BLOCKS)
def test_generated_block_matches_the_code(page, name):
    assert _block(page, name) == GEN.BLOCKS[page][name]() + "\n", f"{page}: block {name!r} {REGENERATE}"


def test_error_code_page_lists_every_code():
    block = _block("docs/reference/error-codes.md", "error-codes")
    assert all(f"| `{code.value}` |" in block for code in ErrorCode)


def test_configuration_page_lists_every_setting_and_its_variable():
    block = _block("docs/reference/configuration.md", "settings")
    for name in Settings.model_fields:
        assert f"| `{name}` | `{ENV_PREFIX}{name.upper()}` |" in block


def _commands(command: Any, path: tuple[str, ...] = ("engram",)) -> list[tuple[tuple[str, ...], Any]]:
    found = [(path, command)]
    for name, sub in getattr(command, "commands", {}).items():
        found += _commands(sub, (*path, name))
    return found


def _sections(page: Path) -> dict[str, str]:
    parts = re.split(r"^## (.+)$", page.read_text(encoding="utf-8"), flags=re.M)
    return {parts[i].strip(): parts[i + 1] for i in range(1, len(parts), 2)}


def test_cli_page_has_a_section_for_every_command_and_option():
    sections = _sections(ROOT / "docs" / "reference" / "cli.md")
    commands = _commands(typer.main.get_command(app))
    assert len(commands) > 25, "the walk found the whole command tree, plugins included"
    missing = [" ".join(path) for path, _ in commands if " ".join(path) not in sections]
    assert not missing, f"docs/reference/cli.md has no section for {missing}; {REGENERATE}"
    for path, command in commands:
        section = sections[" ".join(path)]
        for param in command.params:
            names = [param.name.upper()] if param.param_type_name == "argument" else param.opts
            for flag in names:
                assert f"`{flag}" in section or f" {flag}" in section, (
                    f"{' '.join(path)}: {flag} undocumented; {REGENERATE}"
                )
    documented = set(sections) - {" ".join(path) for path, _ in commands}
    assert not documented, f"docs/reference/cli.md documents commands that do not exist: {documented}"
