"""The operator commands, as one table both paths run: through the live server's
channel, or on an engine the command opened itself while it owns the directory. Each
runs a method of the operator role, ``engine.operator`` (``service/engine/operator.py``).

Arguments and results are JSON values, so a command means the same on either path.
"""

from __future__ import annotations

from collections.abc import Callable
from importlib.metadata import EntryPoint, entry_points
from pathlib import Path
from typing import Any

from engram.models.scope import Scope
from engram.service.engine import CallContext, Engine

Command = Callable[[Engine, dict[str, Any]], Any]


def _scope(args: dict[str, Any]) -> Scope:
    return (str(args["tenant"]), str(args["workspace"]))


def _replay(engine: Engine, args: dict[str, Any]) -> Any:
    search_args = args["arguments"]
    ctx = CallContext(
        tenant=args["tenant"],
        workspace=args["workspace"],
        principal="operator",
        agent_id="operator",
        session="replay",
        purpose=str(search_args.get("purpose_ref", "")),
    )
    return engine.operator.replay_search(ctx, search_args, args["receipt"])


def _tenant(engine: Engine, args: dict[str, Any]) -> str:
    engine.operator.set_tenant_enabled(args["tenant"], bool(args["enabled"]))
    return "enabled" if args["enabled"] else "disabled"


COMMANDS: dict[str, Command] = {
    "rotate-kek": lambda engine, args: engine.operator.rotate_kek(),
    "backup": lambda engine, args: str(
        engine.operator.backup(Path(args["dest"]), include_keys=bool(args.get("include_keys")))
    ),
    "expire": lambda engine, args: len(engine.operator.expire_due()),
    "transition": lambda engine, args: engine.operator.transition(
        _scope(args), args["record_id"], args["operation"], args["reason_ref"]
    ),
    "adjudicate": lambda engine, args: engine.operator.adjudicate(
        _scope(args), args["candidate_id"], args["decision"], args["reason_ref"]
    ),
    "rebuild-projections": lambda engine, args: engine.operator.rebuild_projections(),
    "export-vectors": lambda engine, args: engine.operator.export_vectors(Path(args["out"])),
    "sweep-invalidations": lambda engine, args: engine.operator.sweep_invalidations(),
    "apply-shred-ledger": lambda engine, args: engine.operator.apply_shred_ledger(),
    "tenant-set": _tenant,
    "tenant-status": lambda engine, args: "enabled" if engine.tenant_enabled(args["tenant"]) else "disabled",
    "verify-journal": lambda engine, args: engine.operator.verify_journal(),
    "history": lambda engine, args: engine.operator.history(_scope(args), args["subject"]),
    "replay-search": _replay,
}


#: The entry-point group other rooms register operator commands under (pyproject.toml):
#: name -> a function (engine, args); loaded when first run, so this room never imports
#: the outer ones.
CONTRIBUTED = "engram.operator_commands"


def _contributed(name: str) -> EntryPoint | None:
    found = entry_points(group=CONTRIBUTED, name=name)
    return next(iter(found), None)


def known(name: str) -> bool:
    return name in COMMANDS or _contributed(name) is not None


def run(engine: Engine, name: str, args: dict[str, Any]) -> Any:
    """Run one operator command; KeyError for a name that is not :func:`known`."""
    if name in COMMANDS:
        return COMMANDS[name](engine, args)
    entry = _contributed(name)
    if entry is None:
        raise KeyError(name)
    command: Command = entry.load()
    return command(engine, args)
