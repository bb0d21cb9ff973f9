"""The `engram` command reference (markdown), generated from the typer app itself.

Why generated: a hand-kept list of commands and options drifts the day a flag is added.
This walks the same command tree `engram --help` prints (every command, sub-command and
plugin the CLI registers) and renders one section per command, with its usage, its
help text and each argument and option, so docs/reference/cli.md says exactly what the
code declares; tests/deploy/test_reference_docs.py fails when the page is stale.
"""

from __future__ import annotations

import enum
import inspect
import re
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import typer


def _escape(text: str) -> str:
    """Markdown-safe prose: `<`, `>`, `|` and `*` escaped outside code spans."""
    parts = text.split("`")
    for i in range(0, len(parts), 2):
        parts[i] = (
            parts[i]
            .replace("&", "&amp;")
            .replace("<", "&lt;")
            .replace(">", "&gt;")
            .replace("|", "&#124;")
            .replace("*", "\\*")
        )
    return "`".join(parts)


def _paragraphs(text: str) -> list[str]:
    """A docstring's paragraphs, each re-flowed onto one line."""
    return [" ".join(block.split()) for block in re.split(r"\n\s*\n", text.strip()) if block.strip()]


def walk(command: Any, path: tuple[str, ...] = ("engram",)) -> Iterator[tuple[tuple[str, ...], Any]]:
    """Every (command path, click command) of the tree, parents before their children."""
    yield path, command
    for name, sub in getattr(command, "commands", {}).items():
        if not sub.hidden:
            yield from walk(sub, (*path, name))


def root_command() -> Any:
    """The click command behind `engram` (plugins registered, as `engram --help` sees it)."""
    from engram.service.cli import app

    return typer.main.get_command(app)


def _hints(command: Any) -> dict[str, Any]:
    """The annotations of the function behind COMMAND (typer keeps it as ``__wrapped__``)."""
    function = getattr(command.callback, "__wrapped__", command.callback)
    return typing.get_type_hints(function, include_extras=True) if function is not None else {}


def _value(hint: Any) -> str:
    """What an argument or option takes, from its annotation: an enum's values, a type, a range."""
    kind, *extras = typing.get_args(hint) if typing.get_origin(hint) is typing.Annotated else (hint,)
    options = [arg for arg in typing.get_args(kind) if arg is not type(None)]
    if options and type(None) in typing.get_args(kind):
        kind = options[0]
    if typing.get_origin(kind) is list:
        return f"{_value(typing.get_args(kind)[0])}, repeatable"
    if isinstance(kind, type) and issubclass(kind, enum.Enum):
        return ", ".join(f"`{member.value}`" for member in kind)
    if kind is bool:
        return ""
    name = {Path: "path", str: "text", int: "integer", float: "number"}.get(kind, getattr(kind, "__name__", str(kind)))
    limits = [
        f"{sign} {getattr(info, bound)}"
        for info in extras
        for bound, sign in (("min", "≥"), ("max", "≤"))
        if getattr(info, bound, None) is not None
    ]
    return f"{name} ({', '.join(limits)})" if limits else name


def _default(param: Any) -> str:
    default = param.default
    if param.secondary_opts and isinstance(default, bool):
        return f"`{param.opts[0] if default else param.secondary_opts[0]}`"
    if default is None or default is False or default == [] or param.required:
        return ""
    if isinstance(default, Path) and not default.is_absolute():
        default = f"./{default}"
    return f"`{getattr(default, 'value', default)}`"


def _param_row(param: Any, hints: dict[str, Any]) -> str:
    value = _value(hints[param.name]) if param.name in hints else ""
    text = " ".join((param.help or "").split())
    if param.param_type_name == "argument":
        name = param.name.upper()
        return f"| `{name}`{' (required)' if param.required else ''} | {value} | | {_escape(text)} |"
    flags = ", ".join(param.opts) + "".join(f" / {flag}" for flag in param.secondary_opts)
    if param.required:
        text += " Required."
    if isinstance(param.envvar, str):
        text += f" Environment: `{param.envvar}`."
    return f"| `{flags}` | {value} | {_default(param)} | {_escape(text)} |"


def _section(path: tuple[str, ...], command: Any) -> list[str]:
    arguments = [p for p in command.params if p.param_type_name == "argument"]
    options = [p for p in command.params if p.param_type_name == "option" and not p.hidden]
    usage = " ".join(path)
    if options:
        usage += " [OPTIONS]"
    for argument in arguments:
        usage += f" {argument.name.upper()}" if argument.required else f" [{argument.name.upper()}]"
    if getattr(command, "commands", None):
        usage += " COMMAND [ARGS]..."
    lines = ["", f"## {' '.join(path)}", "", f"Usage: `{usage}`", ""]
    text = _paragraphs(command.help or "")
    doc = inspect.getdoc(command.callback) if command.callback is not None else None
    if doc and getattr(command, "commands", None) == {} and _paragraphs(doc) != text:
        text += _paragraphs(doc)  # a plugin's own docstring, beside the help it registered with
    for paragraph in text:
        lines += [_escape(paragraph), ""]
    subs = [name for name, sub in getattr(command, "commands", {}).items() if not sub.hidden]
    if subs:
        links = ", ".join(f"[{name}](#{'-'.join((*path, name))})" for name in subs)
        lines += [f"Sub-commands: {links}.", ""]
    if arguments or options:
        hints = _hints(command)
        lines += ["| argument or option | value | default | what |", "|---|---|---|---|"]
        lines += [_param_row(p, hints) for p in (*arguments, *options)]
        lines.append("")
    return lines


def reference_page() -> str:
    """The generated body of docs/reference/cli.md: one section per command, in tree order."""
    lines: list[str] = []
    for path, command in walk(root_command()):
        lines += _section(path, command)
    return "\n".join(lines).strip("\n")
